-- The operations view of one workspace (GET /v1/operations, admins): what happened over a
-- window of buckets, read along bounded ranges of indexes, never a scan of the table:
--   due       the workspace's rows due in the window: a range of ix_scheduled_actions_calendar
--             (workspace_id, publish_at);
--   finished  how many rows finished in each bucket: the rollup's ten-minute counts
--             (action_finished_windows), exact; their lag, and the backlog's history, from
--             the rows due in the window or one window's length before it that finished in
--             the window (the calendar index again: a row due longer ago than that is left
--             out of the lag and of the backlog's history, not of the counts);
--   active    the workspace's rows not finished and due by the window's end: a range of
--             ix_action_queue_workspace (workspace_id, due time), the due backlog /v1/stats
--             counts.
-- %(start)s is the first bucket's start, %(stop)s the transaction's now(), %(width)s a
-- bucket's length in seconds (a multiple of ten minutes); bucket i is
-- [start + i*width, start + (i+1)*width).

-- name: operations_series
-- Per action type and bucket: rows due (publish_at in the bucket; a row cancelled before it
-- was due never fell due), published and failed (finished in the bucket), the backlog at
-- the bucket's end (rows whose due time had passed and that had not finished), and the lag
-- (finished_at - publish_at, ms) of the rows published or failed in the bucket. Bucket -1
-- is everything before the window: its backlog is the backlog at the window's start.
-- A row's due time for the backlog is coalesce(next_attempt_at, publish_at), as the tick
-- and /v1/stats read it: a row waiting out a retry's backoff is not behind.
with due as (
    select action_type,
           floor(extract(epoch from publish_at - %(start)s) / %(width)s)::int as bucket
    from scheduled_actions
    where workspace_id = %(workspace_id)s
      and publish_at >= %(start)s and publish_at <= %(stop)s
      and not (status = 'cancelled' and finished_at < publish_at)
),
counted as (
    select action_type, status,
           floor(extract(epoch from bucket - %(start)s) / %(width)s)::int as bucket,
           sum(n) as n
    from action_finished_windows
    where workspace_id = %(workspace_id)s
      and bucket >= %(start)s and bucket <= %(stop)s
      and status in ('published', 'failed')
    group by 1, 2, 3
),
finished as (
    select action_type, status, publish_at, finished_at,
           coalesce(next_attempt_at, publish_at) as due_at,
           floor(extract(epoch from finished_at - %(start)s) / %(width)s)::int as bucket
    from scheduled_actions
    where workspace_id = %(workspace_id)s
      and publish_at >= %(start)s - (%(stop)s - %(start)s) and publish_at <= %(stop)s
      and finished_at >= %(start)s and finished_at <= %(stop)s
),
active as (
    select action_type, due_at
    from action_queue
    where workspace_id = %(workspace_id)s and due_at <= %(stop)s
),
-- The backlog as steps: +1 in the bucket a row fell due (-1: before the window), -1 in the
-- bucket it finished. A row that finished before it was due (cancelled early) never waited.
steps as (
    select action_type,
           greatest(-1, floor(extract(epoch from due_at - %(start)s) / %(width)s)::int) as bucket,
           1 as step
    from active
    union all
    select action_type,
           greatest(-1, floor(extract(epoch from due_at - %(start)s) / %(width)s)::int), 1
    from finished where due_at <= finished_at
    union all
    select action_type, bucket, -1 from finished where due_at <= finished_at
),
moves as (
    select action_type, bucket, sum(step) as step from steps group by action_type, bucket
),
arrivals as (
    select action_type, bucket, count(*) as n from due group by action_type, bucket
),
ends as (
    select action_type, bucket,
           coalesce(sum(n) filter (where status = 'published'), 0) as published,
           coalesce(sum(n) filter (where status = 'failed'), 0) as failed
    from counted
    group by action_type, bucket
),
lags as (
    select action_type, bucket,
           count(*) filter (where status in ('published', 'failed')) as lag_sample,
           percentile_cont(0.5) within group (
               order by extract(epoch from finished_at - publish_at) * 1000)
               filter (where status in ('published', 'failed')) as lag_p50_ms,
           percentile_cont(0.99) within group (
               order by extract(epoch from finished_at - publish_at) * 1000)
               filter (where status in ('published', 'failed')) as lag_p99_ms
    from finished
    group by action_type, bucket
),
types as (
    select action_type from arrivals
    union select action_type from ends
    union select action_type from moves
    union select unnest(%(action_types)s::text[])
),
grid as (
    select t.action_type, b.bucket
    from types t cross join generate_series(-1, %(buckets)s - 1) as b (bucket)
)
select g.action_type, g.bucket,
       coalesce(a.n, 0)::int as due,
       coalesce(e.published, 0)::int as published,
       coalesce(e.failed, 0)::int as failed,
       (sum(coalesce(m.step, 0)) over (
           partition by g.action_type order by g.bucket))::int as backlog,
       coalesce(l.lag_sample, 0)::int as lag_sample,
       l.lag_p50_ms, l.lag_p99_ms
from grid g
left join arrivals a using (action_type, bucket)
left join ends e using (action_type, bucket)
left join lags l using (action_type, bucket)
left join moves m using (action_type, bucket)
order by g.action_type, g.bucket

-- name: operations_outcomes
-- Rows that finished in the window by action type, status and error code ('' for none): the
-- rollup's ten-minute counts.
select action_type, status, error_code, sum(n)::int as count
from action_finished_windows
where workspace_id = %(workspace_id)s
  and bucket >= %(start)s and bucket <= %(stop)s
group by action_type, status, error_code
having sum(n) <> 0
order by action_type, status, error_code

-- name: operations_clock
-- The transaction's now() (the window's end) and the database's clock as it answers, for
-- the skew between the database and this function.
select now() as now, clock_timestamp() as clock

-- name: operations_oldest_transaction
-- The oldest open transaction in the database (migration 0021).
select o.xact_start, o.state, o.sessions_hidden
from tickwork_oldest_transaction() o
