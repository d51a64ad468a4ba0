-- Queries over scheduled_actions. Every state transition names the status it expects in its
-- WHERE clause; a row in any other state is left alone and reported as it is.

-- name: insert_action
insert into scheduled_actions (
    workspace_id, created_by, action_type, thing_id, target_key, payload, publish_at,
    dedupe_key, rescheduled_from, source, recurring_schedule_id, connection_id, recipient_id,
    transactional, original_publish_at, timezone, tags
) values (
    %(workspace_id)s, %(created_by)s, %(action_type)s, %(thing_id)s, %(target_key)s,
    %(payload)s, %(publish_at)s, %(dedupe_key)s, %(rescheduled_from)s, %(source)s,
    %(recurring_schedule_id)s, %(connection_id)s, %(recipient_id)s, %(transactional)s,
    %(original_publish_at)s, %(timezone)s, %(tags)s::text[]
)
on conflict (workspace_id, dedupe_key) where dedupe_key is not null do nothing
returning *

-- name: get_action_by_dedupe_key
select * from scheduled_actions
where workspace_id = %(workspace_id)s and dedupe_key = %(dedupe_key)s

-- name: get_action
select * from scheduled_actions
where id = %(id)s and workspace_id = %(workspace_id)s

-- name: cancel_action
-- queued -> cancelled. The second branch reports the row as it is when nothing changed.
-- A producer cancelling its own row says why in error_code and last_error (a user's
-- cancel leaves them as they are).
with changed as (
    update scheduled_actions
    set updated_at = now(), status = 'cancelled', finished_at = now(),
        error_code = coalesce(%(reason)s, error_code),
        last_error = coalesce(%(message)s, last_error)
    where id = %(id)s and workspace_id = %(workspace_id)s and status = 'queued'
    returning *
)
select true as changed, changed.* from changed
union all
select false as changed, a.* from scheduled_actions a
where a.id = %(id)s and a.workspace_id = %(workspace_id)s
  and not exists (select 1 from changed)

-- name: retry_action
-- failed -> queued, same row, bounded by manual_retries. Due at once: next_attempt_at = now().
-- The change log records the retry in the same statement (migration 0041): who (the API's
-- caller), which retry, the failure it retries, and the old and new due times.
with failed as (
    select id, workspace_id, error_code, coalesce(next_attempt_at, publish_at) as due_at
    from scheduled_actions
    where id = %(id)s and workspace_id = %(workspace_id)s and status = 'failed'
), changed as (
    update scheduled_actions a
    set updated_at = now(), status = 'queued', manual_retries = manual_retries + 1, error_code = null,
        last_error = null, next_attempt_at = now(), enqueued_at = null, submitted_at = null,
        finished_at = null, provider_id = null
    from failed f
    where a.id = f.id and a.workspace_id = f.workspace_id and a.status = 'failed'
      and a.manual_retries < %(max_manual_retries)s
    returning a.*
), logged as (
    insert into action_changes (workspace_id, action_id, kind, actor, reason, old_at, new_at)
    select c.workspace_id, c.id, 'retry', tickwork_actor(c.source),
           'retry ' || c.manual_retries || ' of ' || %(max_manual_retries)s::int || ' after '
               || coalesce(f.error_code, 'a failure'),
           f.due_at, c.next_attempt_at
    from changed c
    join failed f on f.id = c.id
)
select true as changed, changed.* from changed
union all
select false as changed, a.* from scheduled_actions a
where a.id = %(id)s and a.workspace_id = %(workspace_id)s
  and not exists (select 1 from changed)

-- name: claim_actions
-- queued -> submitted for a whole batch, in one statement. Ids not returned were not
-- claimable: cancelled, already claimed elsewhere, finished, not yet due, or too late.
-- With reclaim_after (providers that deduplicate only), submitted -> submitted for a row
-- claimed longer ago than any dispatcher lives: its claimer died, and its message came back.
-- No index names the columns it writes (migrations 0014 and 0017), so it is a HOT update;
-- enqueued_at is set for a row claimed without having been marked, so that every claimed
-- row says when it entered a queue. For a type with fallback providers, route_provider is
-- its first: the attempt's route is recorded as that provider through the row's own
-- connection (migration 0034), before any call and in this round trip; the dispatcher
-- writes it again only for rows it sends elsewhere (record_routes). Null for other types.
-- It returns what a dispatcher reads (actions.Claimed).
update scheduled_actions
set status = 'submitted', submitted_at = now(), attempt_count = attempt_count + 1,
    enqueued_at = coalesce(enqueued_at, now()), updated_at = now(),
    routed_provider = %(route_provider)s::text,
    routed_connection_id = case when %(route_provider)s::text is not null then connection_id end,
    routed_attempt = case when %(route_provider)s::text is not null then attempt_count + 1 end
where id = any(%(ids)s::uuid[])
  and action_type = %(action_type)s
  and (status = 'queued'
       and coalesce(next_attempt_at, publish_at)
           <= now() + make_interval(secs => %(early_tolerance)s)
       or status = 'submitted'
       and %(reclaim_after)s::float8 is not null
       and submitted_at < now() - make_interval(secs => %(reclaim_after)s))
  and (%(max_lateness)s::float8 is null
       or coalesce(next_attempt_at, publish_at) >= now() - make_interval(secs => %(max_lateness)s))
returning id, workspace_id, action_type, thing_id, target_key, payload, publish_at, status,
          attempt_count, manual_retries, next_attempt_at, source, connection_id, recipient_id,
          transactional

-- name: claim_addressed_actions
-- claim_actions for an action type whose provider sends to addresses of a channel (`email`:
-- Postmark, SES; `sms`: Twilio), with suppression (migration 0025): a queued row one of
-- whose addresses is on its workspace's list, for everything or for the rule or campaign
-- that made the row, is queued -> cancelled here (`suppressed`, the masked address and the
-- reason in last_error, which the change log's cancel entry shows) and returned as
-- `cancelled`: no provider sees it. The lookup is one probe of the suppressions primary key
-- per row; the sub-select computes every column from it once. A transactional message
-- ignores `unsubscribed` (an unsubscribe is from the others); a reclaimed row (it may have
-- reached its provider) is not suppressed. It records the route as claim_actions does. Its
-- WHERE and RETURNING are claim_actions' (tests/unit/test_sql_queries.py keeps them the
-- same); other types keep claim_actions, which pays nothing for this.
update scheduled_actions a
set (status, submitted_at, attempt_count, enqueued_at, updated_at, finished_at, error_code,
     last_error, routed_provider, routed_connection_id, routed_attempt) = (
    select case when s.reason is null then 'submitted' else 'cancelled' end,
           case when s.reason is null then now() else a.submitted_at end,
           a.attempt_count + case when s.reason is null then 1 else 0 end,
           case when s.reason is null then coalesce(a.enqueued_at, now()) end,
           now(),
           case when s.reason is not null then now() end,
           case when s.reason is null then a.error_code else 'suppressed' end,
           case when s.reason is null then a.last_error
                else 'suppressed: ' || tickwork_mask_address(s.channel, s.address)
                     || ' is on the suppression list (' || s.reason
                     || case when s.scope <> 'all' then ', for ' || s.scope else '' end
                     || ')' end,
           -- The route, as claim_actions records it (a cancelled row keeps its own).
           case when s.reason is null then %(route_provider)s::text else a.routed_provider end,
           case when s.reason is not null then a.routed_connection_id
                when %(route_provider)s::text is not null then a.connection_id end,
           case when s.reason is not null then a.routed_attempt
                when %(route_provider)s::text is not null then a.attempt_count + 1 end
    from (select) one
    left join lateral (
        select s.channel, s.address, s.scope, s.reason
        from suppressions s
        where a.status = 'queued'
          and s.workspace_id = a.workspace_id
          and s.channel = %(channel)s::text
          and s.address = any(tickwork_claim_addresses(%(channel)s::text, a.payload))
          and s.scope = any(array[
              'all',
              case when a.source = 'rule' then
                  'rule:' || (select r.rule_id from rule_actions r where r.action_id = a.id)
              end,
              case when a.source = 'sequence' then
                  'campaign:' || (select e.campaign_id from enrollment_actions ea
                                  join enrollments e on e.id = ea.enrollment_id
                                  where ea.action_id = a.id)
              end])
          and (s.reason <> 'unsubscribed' or not a.transactional)
        limit 1
    ) s on true
)
where id = any(%(ids)s::uuid[])
  and action_type = %(action_type)s
  and (status = 'queued'
       and coalesce(next_attempt_at, publish_at)
           <= now() + make_interval(secs => %(early_tolerance)s)
       or status = 'submitted'
       and %(reclaim_after)s::float8 is not null
       and submitted_at < now() - make_interval(secs => %(reclaim_after)s))
  and (%(max_lateness)s::float8 is null
       or coalesce(next_attempt_at, publish_at) >= now() - make_interval(secs => %(max_lateness)s))
returning id, workspace_id, action_type, thing_id, target_key, payload, publish_at, status,
          attempt_count, manual_retries, next_attempt_at, source, connection_id, recipient_id,
          transactional

-- name: finalize_actions
-- submitted -> published | failed | queued, for a batch of outcomes, in one statement.
-- attempt_delta is -1 when a claim is reverted before the provider was reached.
-- The ledger gets the provider calls in the same statement, and the outbox the outcomes
-- that a workspace's event endpoints asked for (outcome_events). A call that published its row
-- is recorded by the row itself (attempt_count, submitted_at, finished_at, provider_id: see
-- attempts_of_actions), so the common case sends and writes nothing more. The attempt_*
-- arrays carry the other calls (refused, transient, ambiguous): `attempts` inserts those of
-- rows this update finalized (a plain insert: nothing else writes an attempt of a
-- submitted row). `late_attempts` records an outcome whose row moved on, e.g. recovered as
-- `stuck` while its dispatcher could not write (for a delivery, the arrays above tell,
-- when `ledger`): it replaces that attempt's `stuck` entry, so the resolver knows what the
-- provider said; a repeated write changes nothing.
with finalized as (
    update scheduled_actions a
    set status = f.status,
        provider_id = coalesce(f.provider_id, a.provider_id),
        error_code = f.error_code,
        last_error = coalesce(f.last_error, a.last_error),
        next_attempt_at = f.next_attempt_at,
        attempt_count = a.attempt_count + f.attempt_delta,
        finished_at = case when f.status in ('published', 'failed') then now() end,
        submitted_at = case when f.status = 'queued' then null else a.submitted_at end,
        enqueued_at = null, updated_at = now()
    from unnest(
        %(ids)s::uuid[], %(statuses)s::text[], %(provider_ids)s::text[], %(error_codes)s::text[],
        %(last_errors)s::text[], %(next_attempt_ats)s::timestamptz[], %(attempt_deltas)s::int[]
    ) as f(id, status, provider_id, error_code, last_error, next_attempt_at, attempt_delta)
    where a.id = f.id
      and a.status = 'submitted'
      and f.status in ('published', 'failed', 'queued')
    returning a.id, a.status, a.workspace_id, a.action_type, a.finished_at, a.error_code,
              a.attempt_count, a.provider_id, a.source, a.routed_attempt,
              a.routed_connection_id, a.connection_id
), published as (
    -- What a published row leaves behind (migration 0039), set-based for the wave: its queue
    -- entry, its count (in the totals and in the ten minutes it finished in), and the
    -- message id its provider gave it
    -- when it went through a connection (its status callbacks name it). Another finish is
    -- a row trigger's (tickwork_action_finished): none fires for these.
    select workspace_id, id, action_type, provider_id, connection_id
    from finalized where status = 'published'
), dequeued as (
    delete from action_queue q using published p
    where q.id = p.id and q.workspace_id = p.workspace_id
), counted as (
    insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
    select workspace_id, action_type, 'published', '', count(*)
    from published
    group by workspace_id, action_type
), windowed as (
    insert into action_finished_windows (workspace_id, action_type, status, error_code,
                                         bucket, n)
    select workspace_id, action_type, 'published', '', tickwork_finish_bucket(now()), count(*)
    from published
    group by workspace_id, action_type
), messages as (
    insert into provider_messages (connection_id, message_id, workspace_id, action_id)
    select connection_id, provider_id, workspace_id, id
    from published
    where connection_id is not null and provider_id is not null
    on conflict do nothing
), listening as materialized (
    -- The wave's workspaces that have an active endpoint for an outcome, and which: one
    -- probe of their endpoints per workspace and outcome, not per row (materialized: inlined,
    -- the planner would probe them again for every row).
    select w.workspace_id, o.event_type
    from (select distinct workspace_id from finalized) w
    cross join (values ('action.published'), ('action.failed')) as o(event_type)
    where exists (select 1 from event_endpoints p
                  where p.workspace_id = w.workspace_id and p.status = 'active'
                    and o.event_type = any(p.event_types))
), outcome_events as (
    -- Outcome events (migration 0026): the outcomes of rows whose workspace has an active
    -- endpoint go to the outbox, one insert for the wave; none for other workspaces.
    insert into event_outbox (workspace_id, subject_id, event_type, action_type, status,
                              error_code, attempt_count, provider_id, finished_at)
    select r.workspace_id, r.id, l.event_type, r.action_type, r.status, r.error_code,
           r.attempt_count, r.provider_id, r.finished_at
    from finalized r
    join listening l on l.workspace_id = r.workspace_id and l.event_type = 'action.' || r.status
    where r.status in ('published', 'failed') and r.source <> 'event'
), calls as (
    select l.id, l.attempt, to_timestamp(l.started) as started_at,
           to_timestamp(l.started + l.latency_ms / 1000.0) as finished_at, l.latency_ms,
           l.outcome, l.code, l.excerpt, l.provider, l.reason, r.workspace_id, r.provider_id,
           case when l.provider is not null and r.routed_attempt = l.attempt
                then r.routed_connection_id end as connection_id
    from unnest(
        %(attempt_ids)s::uuid[], %(attempt_numbers)s::int[], %(attempt_outcomes)s::text[],
        %(attempt_started)s::float8[], %(attempt_latencies)s::int[],
        %(attempt_codes)s::text[], %(attempt_excerpts)s::text[],
        %(attempt_providers)s::text[], %(attempt_reasons)s::text[]
    ) as l(id, attempt, outcome, started, latency_ms, code, excerpt, provider, reason)
    left join finalized r on r.id = l.id
), attempts as (
    -- A delivery is recorded here only by a type with fallback providers (which one sent,
    -- through the connection its route recorded); its message id is the row's.
    insert into action_attempts (
        action_id, attempt, workspace_id, started_at, finished_at, latency_ms, outcome,
        provider_code, excerpt, provider, failover_reason, provider_message_id, connection_id
    )
    select id, attempt, workspace_id, started_at, finished_at, latency_ms, outcome, code,
           excerpt, provider, reason,
           case when outcome = 'delivered' then provider_id end, connection_id
    from calls where workspace_id is not null
), late_attempts as (
    insert into action_attempts as t (
        action_id, attempt, workspace_id, started_at, finished_at, latency_ms, outcome,
        provider_code, provider_message_id, excerpt, provider, failover_reason, connection_id
    )
    select c.id, c.attempt, a.workspace_id, c.started_at, c.finished_at, c.latency_ms,
           c.outcome, c.code, null, c.excerpt, c.provider, c.reason,
           case when c.provider is not null and a.routed_attempt = c.attempt
                then a.routed_connection_id end
    from calls c join scheduled_actions a on a.id = c.id
    where c.workspace_id is null
    union all
    select d.id, s.attempt, s.workspace_id, s.started_at, now(), null, 'delivered', null,
           d.provider_id, null, s.provider, s.failover_reason, s.connection_id
    from unnest(%(ids)s::uuid[], %(statuses)s::text[], %(provider_ids)s::text[])
        as d(id, status, provider_id)
    join action_attempts s on s.action_id = d.id and s.outcome = 'stuck'
    where %(ledger)s and d.status = 'published'
      and not exists (select 1 from finalized r where r.id = d.id)
      and not exists (select 1 from calls c where c.id = d.id)
    on conflict (action_id, attempt, workspace_id) do update
    set finished_at = excluded.finished_at, latency_ms = excluded.latency_ms,
        outcome = excluded.outcome, provider_code = excluded.provider_code,
        provider_message_id = excluded.provider_message_id, excerpt = excluded.excerpt,
        provider = coalesce(t.provider, excluded.provider),
        failover_reason = coalesce(t.failover_reason, excluded.failover_reason),
        connection_id = coalesce(t.connection_id, excluded.connection_id)
    where t.outcome = 'stuck'
)
select id, status from finalized

-- name: finalize_published
-- finalize_actions for a wave whose every outcome is a publication that the rows record
-- themselves (no ledger entry to write): a burst's common wave, in a statement with half the
-- planning and two parameters instead of sixteen (store.finalize picks it). The rows are
-- found by their key alone (`id = any`, no join the planner could get wrong on a table it
-- has not analyzed yet), their message ids looked up by id in a JSON object. A row not
-- finalized here (it moved on: recovered as stuck meanwhile) is given to finalize_actions,
-- whose late_attempts records the delivery. Its common table expressions from `published`
-- to `outcome_events` are finalize_actions' (tests/unit/test_sql_queries.py keeps them the
-- same).
with finalized as (
    update scheduled_actions a
    set status = 'published',
        provider_id = coalesce(%(provider_ids)s::jsonb ->> a.id::text, a.provider_id),
        error_code = null, next_attempt_at = null, finished_at = now(), enqueued_at = null,
        updated_at = now()
    where a.id = any(%(ids)s::uuid[])
      and a.status = 'submitted'
    returning a.id, a.status, a.workspace_id, a.action_type, a.finished_at, a.error_code,
              a.attempt_count, a.provider_id, a.source, a.routed_attempt,
              a.routed_connection_id, a.connection_id
), published as (
    -- What a published row leaves behind (migration 0039), set-based for the wave: its queue
    -- entry, its count (in the totals and in the ten minutes it finished in), and the
    -- message id its provider gave it
    -- when it went through a connection (its status callbacks name it). Another finish is
    -- a row trigger's (tickwork_action_finished): none fires for these.
    select workspace_id, id, action_type, provider_id, connection_id
    from finalized where status = 'published'
), dequeued as (
    delete from action_queue q using published p
    where q.id = p.id and q.workspace_id = p.workspace_id
), counted as (
    insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
    select workspace_id, action_type, 'published', '', count(*)
    from published
    group by workspace_id, action_type
), windowed as (
    insert into action_finished_windows (workspace_id, action_type, status, error_code,
                                         bucket, n)
    select workspace_id, action_type, 'published', '', tickwork_finish_bucket(now()), count(*)
    from published
    group by workspace_id, action_type
), messages as (
    insert into provider_messages (connection_id, message_id, workspace_id, action_id)
    select connection_id, provider_id, workspace_id, id
    from published
    where connection_id is not null and provider_id is not null
    on conflict do nothing
), listening as materialized (
    -- The wave's workspaces that have an active endpoint for an outcome, and which: one
    -- probe of their endpoints per workspace and outcome, not per row (materialized: inlined,
    -- the planner would probe them again for every row).
    select w.workspace_id, o.event_type
    from (select distinct workspace_id from finalized) w
    cross join (values ('action.published'), ('action.failed')) as o(event_type)
    where exists (select 1 from event_endpoints p
                  where p.workspace_id = w.workspace_id and p.status = 'active'
                    and o.event_type = any(p.event_types))
), outcome_events as (
    -- Outcome events (migration 0026): the outcomes of rows whose workspace has an active
    -- endpoint go to the outbox, one insert for the wave; none for other workspaces.
    insert into event_outbox (workspace_id, subject_id, event_type, action_type, status,
                              error_code, attempt_count, provider_id, finished_at)
    select r.workspace_id, r.id, l.event_type, r.action_type, r.status, r.error_code,
           r.attempt_count, r.provider_id, r.finished_at
    from finalized r
    join listening l on l.workspace_id = r.workspace_id and l.event_type = 'action.' || r.status
    where r.status in ('published', 'failed') and r.source <> 'event'
)
select id, status from finalized

-- name: explain_action
-- Everything GET /v1/actions/{id}/why reads, in one round trip: the row, its queue entry, what made it (the
-- rule or the drip step, from the producers' ledgers), its change log with the entry of the
-- predecessor that a reschedule replaced by it, and its provider calls from the delivery
-- ledger (sanitized columns only). Each list is read through its table's index on the
-- action id; the lists come as JSON arrays of rows, oldest first.
select a.*,
       ra.rule_id, ra.kind as rule_kind, ra.entity_type as rule_entity_type,
       ra.entity_id as rule_entity_id, ra.reference as rule_reference,
       -- The stored entities an event rule loaded into the snapshot (its `load`): name,
       -- type and id of each, as the snapshot keeps them.
       (select jsonb_agg(jsonb_build_object('name', j.name, 'entity_type',
                                            j.value ->> 'entity_type', 'entity_id',
                                            j.value ->> 'id') order by j.name)
          from jsonb_each(ra.context) as j(name, value)
         where ra.kind = 'event' and j.name not in ('context', 'event', 'rule')
           and jsonb_typeof(j.value) = 'object' and j.value ? 'entity_type'
           and j.value ? 'id') as rule_loaded,
       ea.enrollment_id, ea.step_index, e.campaign_id,
       coalesce((
           select jsonb_agg(to_jsonb(c) order by c.id)
           from action_changes c
           where c.action_id = any(array[a.id, a.rescheduled_from])
             and c.workspace_id = a.workspace_id
             and (c.action_id = a.id or c.new_action_id = a.id)
       ), '[]'::jsonb) as changes,
       coalesce((
           select jsonb_agg(jsonb_build_object(
                      'action_id', t.action_id, 'attempt', t.attempt,
                      'started_at', t.started_at, 'finished_at', t.finished_at,
                      'latency_ms', t.latency_ms, 'outcome', t.outcome,
                      'provider_code', t.provider_code,
                      'provider_message_id', t.provider_message_id, 'excerpt', t.excerpt,
                      'resolution', t.resolution, 'resolved_at', t.resolved_at,
                      'resolution_detail', t.resolution_detail,
                      'delivery_status', t.delivery_status,
                      'delivery_bounce', t.delivery_bounce, 'delivery_at', t.delivery_at,
                      'delivery_detail', t.delivery_detail, 'provider', t.provider,
                      'failover_reason', t.failover_reason)
                  order by t.attempt)
           from action_attempts t
           where t.action_id = a.id and t.workspace_id = a.workspace_id
       ), '[]'::jsonb) as attempts,
       -- Where a row not finished waits (migration 0039): handed to its queue by a
       -- producer or a dispatcher (enqueued_at), or by the tick's pass (its watermark is
       -- past the row and the row is not unsent, since the first pass that reached it);
       -- null for a finished row.
       q.enqueued_at as queue_enqueued_at, q.unsent as queue_unsent,
       tickwork_behind_watermark(q.action_type, q.due_at, q.id) as queue_passed,
       tickwork_passed_at(q.action_type, q.due_at, q.id) as queue_passed_at
from scheduled_actions a
left join action_queue q on q.id = a.id and q.workspace_id = a.workspace_id
left join rule_actions ra on ra.action_id = a.id and ra.workspace_id = a.workspace_id
left join enrollment_actions ea on ea.action_id = a.id and ea.workspace_id = a.workspace_id
left join enrollments e on e.id = ea.enrollment_id and e.workspace_id = a.workspace_id
where a.id = %(id)s and a.workspace_id = %(workspace_id)s

-- name: bulk_cancel_actions
-- queued -> cancelled for at most `limit` rows matching a filter, in (publish_at, id) order
-- after the cursor (after_at, after_id), along the calendar index. `picked` reads one row
-- more than the batch, to tell whether more may follow. The update names the status it
-- expects, as cancel_action does: a row claimed since it was read (it waits for the claim
-- to commit, then reads the row again) is left alone and counted as skipped. The change log
-- is written per row by the cancel trigger (scheduled_actions_log_cancel), the caller as
-- its actor.
with picked as (
    select id, publish_at
    from scheduled_actions
    where workspace_id = %(workspace_id)s
      and (publish_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
      and publish_at < %(before)s::timestamptz
      and status = 'queued'
      and (%(action_type)s::text is null or action_type = %(action_type)s)
      and (%(error_code)s::text is null or error_code = %(error_code)s)
      and (%(thing_id)s::text is null or thing_id = %(thing_id)s)
      and (%(target_key)s::text is null or target_key = %(target_key)s)
    order by publish_at, id
    limit %(limit)s::int + 1
), batch as (
    select id, publish_at from picked order by publish_at, id limit %(limit)s
), changed as (
    update scheduled_actions a
    set updated_at = now(), status = 'cancelled', finished_at = now()
    from batch b
    where a.id = b.id and a.workspace_id = %(workspace_id)s and a.status = 'queued'
    returning a.id
), last as (
    select publish_at, id from batch order by publish_at desc, id desc limit 1
)
select (select count(*) from batch)::int as matched,
       (select count(*) from changed)::int as changed,
       0 as exhausted,
       0 as taken,
       (select count(*) from picked) > %(limit)s as more,
       (select publish_at from last) as last_at,
       (select id from last) as last_id,
       array(select id from changed) as ids

-- name: bulk_retry_actions
-- failed -> queued for at most `limit` rows matching a filter, as retry_action does for one
-- (bounded by manual_retries, due at once), in (publish_at, id) order after the cursor,
-- along the calendar index. Rows that may not be retried are counted, not changed:
-- `exhausted` (manual_retries used up) and `taken` (the thing and target have another
-- active or published row, or an earlier row of this batch takes them: the active-row index
-- and the publish guard would refuse it, and one refusal would fail the whole batch). A row
-- that moved on since it was read is left alone by the update's status check (skipped).
-- Each retry is written to the change log in the same statement.
with picked as (
    select a.id, a.publish_at, a.action_type, a.thing_id, a.target_key,
           a.recurring_schedule_id, a.error_code,
           coalesce(a.next_attempt_at, a.publish_at) as due_at,
           a.manual_retries >= %(max_manual_retries)s as exhausted,
           (a.thing_id is not null and a.recurring_schedule_id is null and exists (
               select 1 from scheduled_actions o
               where o.workspace_id = a.workspace_id and o.thing_id = a.thing_id
                 and o.target_key = a.target_key and o.action_type = a.action_type
                 and o.recurring_schedule_id is null and o.id <> a.id
                 and (o.finished_at is null or o.status = 'published'))) as clash
    from scheduled_actions a
    where a.workspace_id = %(workspace_id)s
      and (a.publish_at, a.id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
      and a.publish_at < %(before)s::timestamptz
      and a.status = 'failed'
      and (%(action_type)s::text is null or a.action_type = %(action_type)s)
      and (%(error_code)s::text is null or a.error_code = %(error_code)s)
      and (%(thing_id)s::text is null or a.thing_id = %(thing_id)s)
      and (%(target_key)s::text is null or a.target_key = %(target_key)s)
    order by a.publish_at, a.id
    limit %(limit)s::int + 1
), batch as (
    select id, publish_at, exhausted,
           clash or (thing_id is not null and recurring_schedule_id is null
                     and not exhausted
                     and count(*) filter (where not exhausted) over (
                         partition by action_type, thing_id, target_key,
                                      recurring_schedule_id is null
                         order by publish_at, id
                         rows between unbounded preceding and current row) > 1) as taken
    from (select * from picked order by publish_at, id limit %(limit)s) p
), changed as (
    update scheduled_actions a
    set updated_at = now(), status = 'queued', manual_retries = manual_retries + 1, error_code = null,
        last_error = null, next_attempt_at = now(), enqueued_at = null, submitted_at = null,
        finished_at = null, provider_id = null
    from batch b
    where a.id = b.id and a.workspace_id = %(workspace_id)s and a.status = 'failed'
      and a.manual_retries < %(max_manual_retries)s
      and not b.exhausted and not b.taken
    returning a.id, a.workspace_id, a.source, a.manual_retries, a.next_attempt_at
), logged as (
    -- Each retry in the change log, as retry_action writes it (migration 0041).
    insert into action_changes (workspace_id, action_id, kind, actor, reason, old_at, new_at)
    select c.workspace_id, c.id, 'retry', tickwork_actor(c.source),
           'retry ' || c.manual_retries || ' of ' || %(max_manual_retries)s::int || ' after '
               || coalesce(p.error_code, 'a failure'),
           p.due_at, c.next_attempt_at
    from changed c
    join picked p on p.id = c.id
), last as (
    select publish_at, id from batch order by publish_at desc, id desc limit 1
)
select (select count(*) from batch)::int as matched,
       (select count(*) from changed)::int as changed,
       (select count(*) from batch where exhausted)::int as exhausted,
       (select count(*) from batch where taken and not exhausted)::int as taken,
       (select count(*) from picked) > %(limit)s as more,
       (select publish_at from last) as last_at,
       (select id from last) as last_id,
       array(select id from changed) as ids

-- name: bulk_cancel_by_tag
-- queued -> cancelled for at most `limit` pending rows carrying a tag, along the queue's GIN
-- index of tagged rows not finished (ix_action_queue_tags: its predicate is repeated here so
-- the planner may use it), each row by its primary key. No order and no cursor: a
-- cancelled row leaves the queue, so the next batch takes what is left. SKIP LOCKED steps
-- over rows a dispatcher holds this instant (its claim wins; a later batch sees them gone
-- or still queued). The update names the status it expects, as cancel_action does; the
-- cancel trigger writes each row's change log with the caller as actor.
with picked as (
    select a.id
    from action_queue q
    join scheduled_actions a on a.id = q.id and a.workspace_id = q.workspace_id
    where q.tags @> array[%(tag)s::text] and cardinality(q.tags) > 0
      and q.workspace_id = %(workspace_id)s
      and a.status = 'queued'
      and (%(action_type)s::text is null or a.action_type = %(action_type)s)
      and (%(target_key)s::text is null or a.target_key = %(target_key)s)
      and (%(thing_id)s::text is null or a.thing_id = %(thing_id)s)
      and a.publish_at >= %(due_from)s::timestamptz and a.publish_at < %(due_to)s::timestamptz
    limit %(limit)s
    for update of a skip locked
), changed as (
    update scheduled_actions a
    set status = 'cancelled', finished_at = now(), updated_at = now()
    from picked p
    where a.id = p.id and a.workspace_id = %(workspace_id)s and a.status = 'queued'
    returning a.id
)
select (select count(*) from picked)::int as matched, array(select id from changed) as ids

-- name: bulk_cancel_by_recipient
-- The same for a recipient's pending rows, along ix_action_queue_recipient.
with picked as (
    select a.id
    from action_queue q
    join scheduled_actions a on a.id = q.id and a.workspace_id = q.workspace_id
    where q.workspace_id = %(workspace_id)s and q.recipient_id = %(recipient_id)s
      and a.status = 'queued'
      and (%(action_type)s::text is null or a.action_type = %(action_type)s)
      and (%(target_key)s::text is null or a.target_key = %(target_key)s)
      and (%(thing_id)s::text is null or a.thing_id = %(thing_id)s)
      and a.publish_at >= %(due_from)s::timestamptz and a.publish_at < %(due_to)s::timestamptz
    limit %(limit)s
    for update of a skip locked
), changed as (
    update scheduled_actions a
    set status = 'cancelled', finished_at = now(), updated_at = now()
    from picked p
    where a.id = p.id and a.workspace_id = %(workspace_id)s and a.status = 'queued'
    returning a.id
)
select (select count(*) from picked)::int as matched, array(select id from changed) as ids

-- name: bulk_cancel_by_entity
-- The same for the pending rows rules made for an entity: its rule_actions along
-- ix_rule_actions_entity, each row by its primary key.
with picked as (
    select a.id
    from rule_actions r
    join scheduled_actions a on a.id = r.action_id
    where r.workspace_id = %(workspace_id)s and r.entity_type = %(entity_type)s
      and r.entity_id = %(entity_id)s
      and a.workspace_id = %(workspace_id)s and a.status = 'queued'
      and (%(action_type)s::text is null or a.action_type = %(action_type)s)
      and (%(target_key)s::text is null or a.target_key = %(target_key)s)
      and (%(thing_id)s::text is null or a.thing_id = %(thing_id)s)
      and a.publish_at >= %(due_from)s::timestamptz and a.publish_at < %(due_to)s::timestamptz
    limit %(limit)s
    for update of a skip locked
), changed as (
    update scheduled_actions a
    set updated_at = now(), status = 'cancelled', finished_at = now()
    from picked p
    where a.id = p.id and a.workspace_id = %(workspace_id)s and a.status = 'queued'
    returning a.id
)
select (select count(*) from picked)::int as matched, array(select id from changed) as ids

-- name: pending_of_tag
-- Whether a pending row with the tag is left (one probe of the same index).
select exists (
    select 1
    from action_queue q
    join scheduled_actions a on a.id = q.id and a.workspace_id = q.workspace_id
    where q.tags @> array[%(tag)s::text] and cardinality(q.tags) > 0
      and q.workspace_id = %(workspace_id)s
      and a.status = 'queued'
      and (%(action_type)s::text is null or a.action_type = %(action_type)s)
      and (%(target_key)s::text is null or a.target_key = %(target_key)s)
      and (%(thing_id)s::text is null or a.thing_id = %(thing_id)s)
      and a.publish_at >= %(due_from)s::timestamptz and a.publish_at < %(due_to)s::timestamptz
)

-- name: pending_of_recipient
select exists (
    select 1
    from action_queue q
    join scheduled_actions a on a.id = q.id and a.workspace_id = q.workspace_id
    where q.workspace_id = %(workspace_id)s and q.recipient_id = %(recipient_id)s
      and a.status = 'queued'
      and (%(action_type)s::text is null or a.action_type = %(action_type)s)
      and (%(target_key)s::text is null or a.target_key = %(target_key)s)
      and (%(thing_id)s::text is null or a.thing_id = %(thing_id)s)
      and a.publish_at >= %(due_from)s::timestamptz and a.publish_at < %(due_to)s::timestamptz
)

-- name: pending_of_entity
select exists (
    select 1
    from rule_actions r
    join scheduled_actions a on a.id = r.action_id
    where r.workspace_id = %(workspace_id)s and r.entity_type = %(entity_type)s
      and r.entity_id = %(entity_id)s
      and a.workspace_id = %(workspace_id)s and a.status = 'queued'
      and (%(action_type)s::text is null or a.action_type = %(action_type)s)
      and (%(target_key)s::text is null or a.target_key = %(target_key)s)
      and (%(thing_id)s::text is null or a.thing_id = %(thing_id)s)
      and a.publish_at >= %(due_from)s::timestamptz and a.publish_at < %(due_to)s::timestamptz
)

-- name: by_index_only
-- A cancel by parent reads along its partial index, never the table: statistics taken
-- before a large cancel still count the rows it has cancelled as the parent's, and a
-- sequential scan would read them again batch after batch. By tag, plain index scans are
-- off too: the tag's index is a GIN one (bitmap scans only), and a probe for one row would
-- otherwise walk the workspace's calendar index, cancelled rows included. Local to the
-- transaction; the caller puts the settings back (`restore_scans`) when its batches are
-- done.
select current_setting('enable_seqscan') as seqscan,
       current_setting('enable_indexscan') as indexscan,
       set_config('enable_seqscan', 'off', true),
       set_config('enable_indexscan', %(indexscan)s, true)

-- name: restore_scans
select set_config('enable_seqscan', %(seqscan)s, true),
       set_config('enable_indexscan', %(indexscan)s, true)
