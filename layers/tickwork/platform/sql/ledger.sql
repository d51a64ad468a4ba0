-- The delivery ledger (action_attempts) and the resolver's transitions. The dispatcher's
-- writes are in finalize_actions (actions.sql) and the tick's in recover_stuck (tick.sql).
-- Every resolver transition names the state it expects: the row failed with the code the
-- resolver read, at the attempt it read; a row changed since is left as it is.

-- name: attempts_of_actions
-- Actions' provider calls: its entries, and the call that published it, which the row
-- itself records (the finalize writes no entry for it): attempt_count, claimed at
-- submitted_at, outcome written at finished_at, the provider's id. Its latency is claim to
-- outcome written (it includes the wave's wait, a few milliseconds). A row published by
-- the resolver has its attempt's entry (with its resolution) instead.
-- The delivery state (from providers' callbacks, migration 0024) comes along; the first
-- callback writes the publishing call's entry, which then replaces the made-up one.
select action_id, attempt, started_at, finished_at, latency_ms, outcome, provider_code,
       provider_message_id, excerpt, resolution, resolved_at, resolution_detail,
       delivery_status, delivery_bounce, delivery_at, delivery_detail, provider,
       failover_reason
from action_attempts
where action_id = any(%(action_ids)s::uuid[]) and workspace_id = %(workspace_id)s
union all
select a.id, a.attempt_count, a.submitted_at, a.finished_at,
       round(extract(epoch from a.finished_at - a.submitted_at) * 1000)::int, 'delivered',
       null, a.provider_id, null, null, null, null, null, null, null, null, null, null
from scheduled_actions a
where a.id = any(%(action_ids)s::uuid[]) and a.workspace_id = %(workspace_id)s
  and a.status = 'published' and a.submitted_at is not null and a.attempt_count > 0
  and not exists (
      select 1 from action_attempts t
      where t.action_id = a.id and t.attempt = a.attempt_count)
order by action_id, attempt

-- name: unresolved_actions
-- A page of the resolver's work: rows failed ambiguous or stuck whose provider can still
-- answer for them (its lookup's retention from the attempt's claim), not asked within the
-- recheck interval, after the (started_at, action_id) cursor. They are found through their
-- attempts' ledger entries (ix_action_attempts_unresolved: every ambiguous and stuck
-- attempt not yet settled, oldest first), each with its row, still failed with that
-- outcome at that attempt. One entry per provider that can be asked: for a type without
-- fallbacks its own provider, taken unless the entry names another (the type lost its
-- fallbacks since); for a type with fallback providers (`routed`) each of them, taken only
-- when the entry names it (an attempt recorded without one is a person's to settle).
-- age_seconds is the attempt's age by the database's clock.
select a.*, e.started_at as attempt_started_at,
       extract(epoch from now() - a.submitted_at)::float8 as age_seconds
from action_attempts e
join scheduled_actions a on a.id = e.action_id and a.workspace_id = e.workspace_id
join unnest(%(action_types)s::text[], %(providers)s::text[], %(routed)s::bool[],
            %(retention_seconds)s::float8[])
    as t(action_type, provider, routed, retention) on a.action_type = t.action_type
where e.outcome in ('ambiguous', 'stuck')
  and (e.resolution is null or e.resolution = 'unresolved')
  and e.started_at > now() - make_interval(secs => (select max(retention) from
                          unnest(%(retention_seconds)s::float8[]) as r(retention)))
  and (e.started_at, e.action_id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
  and a.status = 'failed'
  and a.error_code = e.outcome
  and e.attempt = greatest(a.attempt_count, 1)
  and case when t.routed then e.provider = t.provider
           else e.provider is null or e.provider = t.provider end
  and a.submitted_at > now() - make_interval(secs => t.retention)
  and (e.resolved_at is null
       or e.resolved_at <= now() - make_interval(secs => %(recheck_seconds)s))
order by e.started_at, e.action_id
limit %(limit)s

-- name: attempt_route
-- Which provider an attempt called, and through which connection (null: the provider's
-- stack-wide options, or not recorded): the ledger entry of a type with fallback providers.
select provider, connection_id from action_attempts
where action_id = %(id)s and attempt = greatest(%(attempt)s::int, 1)

-- name: provider_id_of_another_action
-- Another action of the connection already recorded under the provider id a lookup found:
-- a lookup that matches by content (Twilio, Mastodon) may find a twin's message.
select action_id as id from provider_messages
where connection_id = %(connection_id)s and message_id = %(provider_id)s
  and action_id <> %(id)s
limit 1

-- name: resolve_delivered
-- failed (ambiguous | stuck) -> published: the provider has the message, under
-- provider_id. Nothing is sent; the attempt's ledger entry says how it was settled.
with changed as (
    update scheduled_actions
    set status = 'published', provider_id = coalesce(%(provider_id)s, provider_id),
        error_code = null, last_error = %(message)s, updated_at = now()
    where id = %(id)s and workspace_id = %(workspace_id)s
      and status = 'failed' and error_code = %(expected_code)s
      and attempt_count = %(attempt)s
    returning id, workspace_id, attempt_count, connection_id, provider_id
), message as (
    -- Its status callbacks name the message id (as the finalize's for a row it publishes).
    insert into provider_messages (connection_id, message_id, workspace_id, action_id)
    select connection_id, provider_id, workspace_id, id from changed
    where connection_id is not null and provider_id is not null
    on conflict do nothing
), noted as (
    insert into action_attempts as t (
        action_id, attempt, workspace_id, started_at, outcome, provider_message_id,
        resolution, resolved_at, resolution_detail
    )
    select id, greatest(attempt_count, 1), workspace_id, coalesce(%(started_at)s, now()),
           %(expected_code)s, %(provider_id)s, 'delivered', now(), %(detail)s
    from changed
    on conflict (action_id, attempt, workspace_id) do update
    set resolution = excluded.resolution, resolved_at = excluded.resolved_at,
        resolution_detail = excluded.resolution_detail,
        provider_message_id = coalesce(excluded.provider_message_id, t.provider_message_id)
)
select id from changed

-- name: resolve_requeued
-- failed (ambiguous | stuck) -> queued, due now: the provider provably has no such message
-- and the attempt is older than the lookup's grace. At most once per action (no attempt
-- of it was requeued before), and never for an action any attempt of which is recorded
-- delivered (an outcome written late).
with changed as (
    update scheduled_actions a
    set status = 'queued', error_code = null, last_error = %(message)s,
        next_attempt_at = now(), finished_at = null, submitted_at = null,
        enqueued_at = null, provider_id = null, updated_at = now()
    where a.id = %(id)s and a.workspace_id = %(workspace_id)s
      and a.status = 'failed' and a.error_code = %(expected_code)s
      and a.attempt_count = %(attempt)s
      and a.submitted_at < now() - make_interval(secs => %(grace_seconds)s)
      and not exists (
          select 1 from action_attempts r
          where r.action_id = a.id and (r.resolution = 'requeued' or r.outcome = 'delivered'))
    returning a.id, a.workspace_id, a.attempt_count
), noted as (
    insert into action_attempts as t (
        action_id, attempt, workspace_id, started_at, outcome, resolution, resolved_at,
        resolution_detail
    )
    select id, greatest(attempt_count, 1), workspace_id, coalesce(%(started_at)s, now()),
           %(expected_code)s, 'requeued', now(), %(detail)s
    from changed
    on conflict (action_id, attempt, workspace_id) do update
    set resolution = excluded.resolution, resolved_at = excluded.resolved_at,
        resolution_detail = excluded.resolution_detail
)
select id from changed

-- name: resolve_unresolved
-- The row stays failed; its attempt's entry says why the resolver could not settle it.
-- An entry another resolver settled meanwhile is left as it is. The row is touched first
-- (updated_at): a removal of old history (retention) holding it is waited for, after
-- which the row is gone and nothing is written; one that archived it before sees it
-- changed and leaves it for its next run.
with touched as (
    update scheduled_actions a set updated_at = now()
    where a.id = %(id)s and a.workspace_id = %(workspace_id)s
      and a.status = 'failed' and a.error_code = %(expected_code)s
      and a.attempt_count = %(attempt)s
    returning a.id, a.attempt_count, a.workspace_id, a.submitted_at, a.error_code
)
insert into action_attempts as t (
    action_id, attempt, workspace_id, started_at, outcome, resolution, resolved_at,
    resolution_detail
)
select a.id, greatest(a.attempt_count, 1), a.workspace_id, coalesce(a.submitted_at, now()),
       a.error_code, 'unresolved', now(), %(detail)s
from touched a
on conflict (action_id, attempt, workspace_id) do update
set resolution = excluded.resolution, resolved_at = excluded.resolved_at,
    resolution_detail = excluded.resolution_detail
where t.resolution is null or t.resolution = 'unresolved'
returning action_id
