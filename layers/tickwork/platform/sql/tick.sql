-- Queries of the tick, the cron that hands due rows to their queues, and of the paths that
-- enqueue a row at once (the API for rows due within the look-ahead, dispatcher backoffs).

-- name: mark_due_enqueued
-- Takes the next batch of due rows that are in no queue, in (due time, id) order after the
-- pass's cursor (after_due, after_id: the last row the tick's previous pass marked,
-- so a pass does not read again what the one before it marked), and marks them enqueued.
-- No index names enqueued_at (migration 0017): the mark is a HOT update. SKIP LOCKED lets
-- concurrent ticks take disjoint batches; the outer WHERE re-checks the state so a row is
-- never marked twice. The update finds the rows by the tuple ids the lock returned (a TID
-- scan), not by a second walk of the primary key: a row locked by this transaction cannot
-- move before its update, and the outer WHERE re-checks whatever the scan finds.
with marked as (
    update scheduled_actions a
    set enqueued_at = now(), updated_at = now()
    where a.ctid = any(array(
            select ctid
            from scheduled_actions
            where status = 'queued'
              and enqueued_at is null
              and finished_at is null
              and coalesce(next_attempt_at, publish_at) <= %(horizon)s
              and (coalesce(next_attempt_at, publish_at), id) > (%(after_due)s, %(after_id)s)
              and action_type = any(%(action_types)s::text[])
            order by coalesce(next_attempt_at, publish_at), id
            limit %(batch_size)s
            for update skip locked
        ))
      and a.status = 'queued' and a.enqueued_at is null
    returning a.id, a.action_type, coalesce(a.next_attempt_at, a.publish_at) as due_at,
              a.workspace_id
)
select id, action_type, due_at, workspace_id from marked order by due_at, id

-- name: commit_without_flush_wait
-- A mark-and-send transaction commits without waiting for its WAL to reach the disk. Its
-- messages are in the queue before it commits, so a mark lost in a server crash costs what
-- a tick dying before its commit costs: the row is found and sent again, a duplicate
-- message that the conditional claim absorbs. A claim of the row commits synchronously,
-- which flushes the mark's earlier commit record with it. Local to the transaction.
select set_config('synchronous_commit', 'off', true)

-- name: mark_enqueued_by_id
-- The same marking for named rows, when they are due within the horizon. Both return each
-- row's workspace: its messages' group, which the queue shares its consumers by.
update scheduled_actions
set enqueued_at = now(), updated_at = now()
where id = any(%(ids)s::uuid[])
  and status = 'queued'
  and enqueued_at is null
  and coalesce(next_attempt_at, publish_at) <= %(horizon)s
  and action_type = any(%(action_types)s::text[])
returning id, action_type, coalesce(next_attempt_at, publish_at) as due_at, workspace_id

-- name: unmark_enqueued
-- A queued row whose message was not sent, or could not be acted on, goes back to the tick.
-- Only the message for the row's current due time may do so: a stale duplicate (a message
-- for an earlier attempt) leaves alone the row whose live message is still on its way.
update scheduled_actions a
set enqueued_at = null
from unnest(%(ids)s::uuid[], %(due_ats)s::timestamptz[]) as m(id, due_at)
where a.id = m.id
  and a.status = 'queued'
  and a.enqueued_at is not null
  and coalesce(a.next_attempt_at, a.publish_at) = m.due_at

-- name: release_all_enqueued
-- A local runtime starting with an empty in-process queue: every message it had was lost.
-- Marked rows are due within the look-ahead (see release_lost_messages, which catches any
-- other after the redelivery timeout).
update scheduled_actions
set enqueued_at = null
where status = 'queued' and enqueued_at is not null and finished_at is null
  and coalesce(next_attempt_at, publish_at) <= now() + make_interval(secs => %(due_within)s)
  and action_type = any(%(action_types)s::text[])
returning id

-- name: release_lost_messages
-- Queued rows handed to a queue so long ago that their message must have been lost. A row
-- is marked only when due within the look-ahead, and nothing moves a marked row's due time
-- without clearing its mark, so the due index's range up to now + due_within (the
-- look-ahead and the clock-skew tolerance) holds every candidate.
update scheduled_actions
set enqueued_at = null
where status = 'queued'
  and finished_at is null
  and coalesce(next_attempt_at, publish_at) <= now() + make_interval(secs => %(due_within)s)
  and enqueued_at < now() - make_interval(secs => %(redelivery_timeout)s)
returning id, action_type

-- name: recover_stuck
-- Zombies: claimed by a dispatcher that never recorded an outcome (it died, timed out, or
-- the database stayed down past its retries: then it logged an `outcome unwritten` line).
-- The provider may have been called, so the row fails as `stuck` instead of firing again;
-- the ledger records that attempt as `stuck` (for the resolver to settle with the provider),
-- naming the provider and connection it was calling when its type has fallback providers
-- (recorded before the call, migration 0034; null when it was routed for another attempt:
-- the dispatcher died before routing this one).
with recovered as (
    update scheduled_actions
    set status = 'failed', error_code = 'stuck', finished_at = now(),
        last_error = 'no outcome recorded within ' || %(stuck_timeout)s || ' s of the claim;'
            || ' the provider may have been called: look for an ''outcome unwritten'' log line'
            || ' with this action id before retrying'
    -- A row is claimed only when due within the clock-skew tolerance, so the due index's
    -- range up to now + due_within holds every candidate.
    where status = 'submitted'
      and finished_at is null
      and coalesce(next_attempt_at, publish_at) <= now() + make_interval(secs => %(due_within)s)
      and submitted_at < now() - make_interval(secs => %(stuck_timeout)s)
    returning id, action_type, workspace_id, attempt_count, submitted_at,
              case when routed_attempt = attempt_count then routed_provider end as provider,
              case when routed_attempt = attempt_count then routed_connection_id end
                  as connection_id
), noted as (
    insert into action_attempts (action_id, attempt, workspace_id, started_at, outcome, excerpt,
                                 provider, connection_id)
    select id, greatest(attempt_count, 1), workspace_id, submitted_at, 'stuck',
           'no outcome recorded within ' || %(stuck_timeout)s || ' s of the claim', provider,
           connection_id
    from recovered
    on conflict (action_id, attempt, workspace_id) do nothing
)
select id, action_type from recovered

-- name: expire_late
-- Rows of one action type too late to be worth sending fail as `expired`.
update scheduled_actions
set status = 'failed', error_code = 'expired', finished_at = now(),
    last_error = 'not sent: more than ' || %(max_lateness)s || ' s late'
where id = any(array(
        select id
        from scheduled_actions
        where status = 'queued'
          and enqueued_at is null
          and finished_at is null
          and coalesce(next_attempt_at, publish_at)
              < now() - make_interval(secs => %(max_lateness)s)
          and action_type = %(action_type)s
        order by coalesce(next_attempt_at, publish_at), id
        limit %(batch_size)s
        for update skip locked
    ))
  and status = 'queued'
returning id
