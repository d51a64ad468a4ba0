-- Queries of the tick, the cron that hands due rows to their queues, and of the paths that
-- hand a row to its queue at once (the API for rows due within the look-ahead, dispatcher
-- backoffs). They read action_queue, which holds exactly the rows not finished (migration
-- 0039): the tick writes nothing per row it sends, only its type's watermark.

-- name: pass_plans
-- The pass's reads walk ix_action_queue_due in its order, however few rows the planner
-- expects: with statistics older than a burst (the queue is new rows, analyzed later), it
-- would otherwise read every due row into a sort (or a bitmap) for each batch. Local to the
-- pass's transaction.
select set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)

-- name: ensure_watermark
-- A type's first pass starts before every due time.
insert into tick_watermarks (action_type, due_at, id)
values (%(action_type)s, '0001-01-01 00:00:00+00', '00000000-0000-0000-0000-000000000000')
on conflict (action_type) do nothing

-- name: lock_watermark
-- The type's watermark, locked for this pass: another tick running the same type at the
-- same time skips it (no row back) rather than send the same rows.
select due_at, id from tick_watermarks
where action_type = %(action_type)s
for update skip locked

-- name: due_after_watermark
-- The next rows of the type after its watermark and due by the horizon, in (due time, id)
-- order: a range of ix_action_queue_due. A row a producer or a dispatcher already handed to
-- its queue (enqueued_at) is not sent again.
select id, action_type, due_at, workspace_id
from action_queue
where action_type = %(action_type)s
  and (due_at, id) > (%(after_due)s, %(after_id)s)
  and due_at <= %(horizon)s
  and enqueued_at is null
order by due_at, id
limit %(batch_size)s

-- name: unsent_due
-- Rows of the type behind its watermark that no queue has (handed back by a dispatcher,
-- moved behind it, or their message lost), due by the horizon: a range of the partial
-- ix_action_queue_unsent, which holds only them.
select id, action_type, due_at, workspace_id
from action_queue
where action_type = %(action_type)s and unsent and due_at <= %(horizon)s
order by due_at, id
limit %(batch_size)s

-- name: advance_watermark
-- The pass sent every row up to (due_at, id): the watermark moves there, never back, and
-- the pass is noted (what it reached, and when).
with moved as (
    update tick_watermarks
    set due_at = %(due_at)s, id = %(id)s, advanced_at = now()
    where action_type = %(action_type)s and (due_at, id) < (%(due_at)s, %(id)s)
    returning action_type
)
insert into tick_passes (action_type, upto_due, upto_id)
select action_type, %(due_at)s, %(id)s from moved
on conflict do nothing

-- name: forget_old_passes
-- Passes older than a day: a row they handed over and still queued has waited longer than
-- any timeout (tickwork_passed_at then answers null, and the row counts as lost).
delete from tick_passes where passed_at < now() - interval '1 day'

-- name: mark_sent
-- Unsent rows the tick's pass sent: handed to their queue now.
update action_queue
set unsent = false, enqueued_at = now()
where id = any(%(ids)s::uuid[]) and unsent

-- name: mark_unsent
-- Rows of a pass whose send failed, behind the watermark the pass moved: the next pass
-- sends them.
update action_queue
set unsent = true, enqueued_at = null
where id = any(%(ids)s::uuid[])

-- name: commit_without_flush_wait
-- A pass commits without waiting for its WAL to reach the disk. Its messages are in the
-- queue before it commits, so a watermark lost in a server crash costs what a tick dying
-- before its commit costs: the rows are sent again, duplicate messages that the
-- dispatcher's conditional claim absorbs. Local to the transaction.
select set_config('synchronous_commit', 'off', true)

-- name: mark_enqueued_by_id
-- Named rows still queued and due within the horizon, handed to their queue now: by a
-- producer after its commit, a dispatcher's backoff, the tick for unsent rows. Returns each
-- row's workspace: its messages' group, which the queue shares its consumers by.
update action_queue q
set enqueued_at = now(), unsent = false
from scheduled_actions a
where q.id = any(%(ids)s::uuid[])
  and q.due_at <= %(horizon)s
  and q.action_type = any(%(action_types)s::text[])
  and a.id = q.id and a.workspace_id = q.workspace_id
  and a.status = 'queued'
returning q.id, q.action_type, q.due_at, q.workspace_id

-- name: unmark_enqueued
-- A queued row whose message was not sent, or could not be acted on, goes back to the tick:
-- behind the watermark it is unsent (the next pass sends it), ahead of it the tick's pass
-- reaches it anyway. Only the message for the row's current due time may do so: a stale
-- duplicate (a message for an earlier attempt) leaves alone the row whose live message is
-- still on its way, and a row claimed or finished meanwhile is not queued.
update action_queue q
set enqueued_at = null, unsent = tickwork_behind_watermark(q.action_type, q.due_at, q.id)
from unnest(%(ids)s::uuid[], %(due_ats)s::timestamptz[]) as m(id, due_at), scheduled_actions a
where q.id = m.id
  and q.due_at = m.due_at
  and a.id = q.id and a.workspace_id = q.workspace_id
  and a.status = 'queued'

-- name: release_all_enqueued
-- A local runtime starting with an empty in-process queue: every message it had was lost.
-- The types' passes start again from the first row not finished, and nothing counts as
-- handed to a queue (a row claimed meanwhile is skipped by its claim).
with forgotten as (
    delete from tick_watermarks where action_type = any(%(action_types)s::text[])
)
update action_queue
set enqueued_at = null, unsent = false
where action_type = any(%(action_types)s::text[])
  and (enqueued_at is not null or unsent)
returning id

-- name: release_lost_messages
-- Queued rows behind their type's watermark, handed to a queue so long ago that their
-- message must have been lost: unsent, for the tick's next pass. Handed over at enqueued_at
-- (by a producer, a dispatcher or this sweep), else by the first tick pass that reached it
-- (tickwork_passed_at; none within a day: long ago). A pass hands over rows due within the
-- look-ahead, so the queue's due range up to now - timeout + due_within holds every
-- candidate (per type, ix_action_queue_due); each row's status by its primary key.
update action_queue q
set unsent = true, enqueued_at = null
from scheduled_actions a
where q.action_type = any(%(action_types)s::text[])
  and q.due_at < now() - make_interval(secs => %(redelivery_timeout)s)
                       + make_interval(secs => %(due_within)s)
  and not q.unsent
  and tickwork_behind_watermark(q.action_type, q.due_at, q.id)
  and coalesce(q.enqueued_at, tickwork_passed_at(q.action_type, q.due_at, q.id), '-infinity')
      < now() - make_interval(secs => %(redelivery_timeout)s)
  and a.id = q.id and a.workspace_id = q.workspace_id
  and a.status = 'queued'
returning q.id, q.action_type

-- name: recover_stuck
-- Zombies: claimed by a dispatcher that never recorded an outcome (it died, timed out, or
-- the database stayed down past its retries: then it logged an `outcome unwritten` line).
-- The provider may have been called, so the row fails as `stuck` instead of firing again;
-- the ledger records that attempt as `stuck` (for the resolver to settle with the provider),
-- naming the provider and connection it was calling when its type has fallback providers
-- (recorded before the call, migration 0034; null when it was routed for another attempt:
-- the dispatcher died before routing this one). A row is claimed only when due within the
-- clock-skew tolerance of its claim (submitted_at), so a row claimed more than
-- stuck_timeout ago is due before now - stuck_timeout + due_within: that range of the
-- queue holds every candidate, and not the rows of a burst just due, which the tick is
-- about to send. (The finish takes the row out of the queue: tickwork_action_finished.)
with recovered as (
    update scheduled_actions a
    set status = 'failed', error_code = 'stuck', finished_at = now(), updated_at = now(),
        last_error = 'no outcome recorded within ' || %(stuck_timeout)s || ' s of the claim;'
            || ' the provider may have been called: look for an ''outcome unwritten'' log line'
            || ' with this action id before retrying'
    from action_queue q
    where q.action_type = any(%(action_types)s::text[])
      and q.due_at <= now() + make_interval(secs => %(due_within)s - %(stuck_timeout)s)
      and a.id = q.id and a.workspace_id = q.workspace_id
      and a.status = 'submitted'
      and a.submitted_at < now() - make_interval(secs => %(stuck_timeout)s)
    returning a.id, a.action_type, a.workspace_id, a.attempt_count, a.submitted_at,
              case when a.routed_attempt = a.attempt_count then a.routed_provider end
                  as provider,
              case when a.routed_attempt = a.attempt_count then a.routed_connection_id end
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
-- Rows of one action type too late to be worth sending fail as `expired`: the oldest first,
-- a batch at a time, along the queue's due range. A row claimed meanwhile is not queued
-- (the update's condition is checked again on the row it locks).
with late as (
    select q.id, q.workspace_id
    from action_queue q
    join scheduled_actions s on s.id = q.id and s.workspace_id = q.workspace_id
    where q.action_type = %(action_type)s
      and q.due_at < now() - make_interval(secs => %(max_lateness)s)
      and s.status = 'queued'
    order by q.due_at, q.id
    limit %(batch_size)s
)
update scheduled_actions a
set status = 'failed', error_code = 'expired', finished_at = now(), updated_at = now(),
    last_error = 'not sent: more than ' || %(max_lateness)s || ' s late'
from late
where a.id = late.id and a.workspace_id = late.workspace_id
  and a.status = 'queued'
returning a.id
