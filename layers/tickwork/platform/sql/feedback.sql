-- Delivery feedback (migration 0024): providers' status callbacks become later states of
-- the attempt that published a row. Every query but the first runs in the connection's
-- workspace's tenant transaction (row-level security).

-- name: callback_connection
-- The connection a callback names, whatever its workspace (a security definer function:
-- the caller has no workspace yet).
select * from tickwork_callback_connection(%(id)s)

-- name: become_api_role
-- Inside a transaction: act as the API role with no workspace (sees no tenant's rows).
select set_config('role', 'tickwork_api', true), set_config('tickwork.workspace_id', '', true)

-- name: note_receipt
-- The callback's event, once: no row back when it was seen before (a duplicate). A few of
-- the connection's expired receipts go first, along ix_callback_receipts_age.
with expired as (
    delete from callback_receipts
    where ctid = any(array(
        select ctid from callback_receipts
        where connection_id = %(connection_id)s
          and received_at < now() - make_interval(days => %(keep_days)s)
        order by received_at
        limit 20))
)
insert into callback_receipts (connection_id, event_key, workspace_id)
values (%(connection_id)s, %(event_key)s, %(workspace_id)s)
on conflict (connection_id, event_key, workspace_id) do nothing
returning received_at

-- name: delivery_target
-- The published row a provider's message id belongs to, within the connection it was sent
-- through (provider_messages, which the finalize writes), locked until the commit: a
-- removal of old history (retention) holding it is waited for (then the row is gone, and
-- the event unmatched), and none starts while the event is recorded.
select a.id, a.attempt_count
from provider_messages m
join scheduled_actions a on a.id = m.action_id and a.workspace_id = m.workspace_id
where m.connection_id = %(connection_id)s and m.message_id = %(message_id)s
  and m.workspace_id = %(workspace_id)s
  and a.connection_id = %(connection_id)s and a.provider_id = %(message_id)s
  and a.status = 'published'
order by a.finished_at desc nulls last
limit 1
for no key update of a

-- name: delivery_before
-- The attempt's delivery state before this event, its entry locked until the commit (an
-- entry not written yet has none).
select delivery_status, delivery_bounce, delivery_at, delivery_detail
from action_attempts
where action_id = %(action_id)s and attempt = %(attempt)s and workspace_id = %(workspace_id)s
for update

-- name: record_delivery
-- The published attempt's entry takes the new state when it ranks above the one it has;
-- otherwise nothing changes and no row comes back. The finalize writes no entry for the
-- call that published a row (attempts_of_actions makes it up from the row): the first
-- callback writes it, with what the row records of that call. A new state touches the
-- row's updated_at (its answer's `delivery` changed): a removal that archived the row
-- before sees it changed and leaves it for the next run.
with recorded as (
insert into action_attempts as t (
    action_id, attempt, workspace_id, started_at, finished_at, latency_ms, outcome,
    provider_message_id, delivery_status, delivery_bounce, delivery_rank, delivery_at,
    delivery_detail, delivery_received_at
)
select a.id, greatest(a.attempt_count, 1), a.workspace_id,
       coalesce(a.submitted_at, a.finished_at, now()), a.finished_at,
       round(extract(epoch from a.finished_at - a.submitted_at) * 1000)::int, 'delivered',
       a.provider_id, %(status)s, %(bounce)s, %(rank)s, coalesce(%(at)s::timestamptz, now()),
       %(detail)s, now()
from scheduled_actions a
where a.id = %(action_id)s and a.workspace_id = %(workspace_id)s and a.status = 'published'
  and greatest(a.attempt_count, 1) = %(attempt)s
on conflict (action_id, attempt, workspace_id) do update
set delivery_status = excluded.delivery_status, delivery_bounce = excluded.delivery_bounce,
    delivery_rank = excluded.delivery_rank, delivery_at = excluded.delivery_at,
    delivery_detail = excluded.delivery_detail,
    delivery_received_at = excluded.delivery_received_at,
    provider_message_id = coalesce(t.provider_message_id, excluded.provider_message_id)
where coalesce(t.delivery_rank, 0) < excluded.delivery_rank
returning action_id, attempt
), touched as (
    update scheduled_actions a set updated_at = now()
    from recorded r
    where a.id = r.action_id and a.workspace_id = %(workspace_id)s
)
select action_id, attempt from recorded

-- name: count_callback
insert into callback_counts as c (connection_id, outcome, shard, workspace_id, count, last_at)
values (%(connection_id)s, %(outcome)s, %(shard)s, %(workspace_id)s, 1, now())
on conflict (connection_id, outcome, shard, workspace_id) do update
set count = c.count + 1, last_at = now()

-- name: callback_counts
-- Connections' callback counts, summed over their shards.
select connection_id, outcome, sum(count)::bigint as count, max(last_at) as last_at
from callback_counts
where connection_id = any(%(ids)s::uuid[]) and workspace_id = %(workspace_id)s
group by connection_id, outcome
