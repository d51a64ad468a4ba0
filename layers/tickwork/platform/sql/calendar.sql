-- The calendar and the numbers an operator or a UI wants about a workspace.

-- name: list_actions
-- Keyset pagination in (publish_at, id) order over the calendar index; the cursor is the
-- last (publish_at, id) seen, or (from, the nil uuid) for the first page.
select *
from scheduled_actions
where workspace_id = %(workspace_id)s
  and (publish_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
  and publish_at < %(to)s
  and (%(status)s::text is null or status = %(status)s)
  and (%(action_type)s::text is null or action_type = %(action_type)s)
  and (%(thing_id)s::text is null or thing_id = %(thing_id)s)
  and (%(error_code)s::text is null or error_code = %(error_code)s)
  and (%(target_key)s::text is null or target_key = %(target_key)s)
  and (%(tag)s::text is null or tags @> array[%(tag)s::text])
order by publish_at, id
limit %(limit)s

-- name: small_reads
-- Settings for the rest of a stats transaction (see calendar.SMALL_READS).
select set_config('max_parallel_workers_per_gather', '0', true),
       set_config('jit', 'off', true),
       set_config('enable_seqscan', 'off', true)

-- name: stats_backlog
-- Queued rows already due, along the workspace's range of the queue (rows not finished, by
-- due time): small unless something is behind.
select count(*), extract(epoch from now() - min(q.due_at))::float8
from action_queue q
join scheduled_actions a on a.id = q.id and a.workspace_id = q.workspace_id
where q.workspace_id = %(workspace_id)s
  and q.due_at <= now()
  and a.status = 'queued'

-- name: stats_lag
-- How late rows due in the last hour were claimed, in milliseconds.
select count(*),
       percentile_cont(array[0.5, 0.95, 0.99]) within group (
           order by extract(epoch from submitted_at - publish_at) * 1000
       )
from scheduled_actions
where workspace_id = %(workspace_id)s
  and publish_at >= now() - interval '1 hour'
  and publish_at <= now()
  and submitted_at is not null

-- name: calendar_counts
-- How many actions each local day or hour (date_trunc of the wall time in %(zone)s) of the
-- range holds, by status: one index range scan of the calendar index, grouped.
select date_trunc(%(unit)s, publish_at at time zone %(zone)s) as bucket, status, count(*) as n
from scheduled_actions
where workspace_id = %(workspace_id)s
  and publish_at >= %(from)s and publish_at < %(to)s
  and (%(status)s::text is null or status = %(status)s)
  and (%(action_type)s::text is null or action_type = %(action_type)s)
group by 1, 2
order by 1, 2

-- name: calendar_firsts
-- The first %(per_bucket)s actions of each local day or hour of the range, in due order.
select bucket, id, action_type, target_key, status, publish_at
from (
    select date_trunc(%(unit)s, publish_at at time zone %(zone)s) as bucket,
           id, action_type, target_key, status, publish_at,
           row_number() over (
               partition by date_trunc(%(unit)s, publish_at at time zone %(zone)s)
               order by publish_at, id
           ) as n
    from scheduled_actions
    where workspace_id = %(workspace_id)s
      and publish_at >= %(from)s and publish_at < %(to)s
      and (%(status)s::text is null or status = %(status)s)
      and (%(action_type)s::text is null or action_type = %(action_type)s)
) ranked
where n <= %(per_bucket)s
order by bucket, publish_at, id
