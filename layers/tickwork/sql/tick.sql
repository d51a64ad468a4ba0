-- Queries of the tick: the cron that hands due rows to their queues.

-- name: mark_due_enqueued
-- Takes the next batch of due rows that are in no queue, in (due time, id) order, and marks
-- them enqueued. SKIP LOCKED lets concurrent ticks take disjoint batches.
with marked as (
    update scheduled_actions a
    set enqueued_at = now()
    where a.id = any(array(
            select id
            from scheduled_actions
            where status = 'queued'
              and enqueued_at is null
              and coalesce(next_attempt_at, publish_at) <= %(horizon)s
              and action_type <> all(%(paused_types)s::text[])
            order by coalesce(next_attempt_at, publish_at), id
            limit %(batch_size)s
            for update skip locked
        ))
      and a.status = 'queued' and a.enqueued_at is null
    returning a.id, a.action_type, coalesce(a.next_attempt_at, a.publish_at) as due_at
)
select id, action_type, due_at from marked order by due_at, id
