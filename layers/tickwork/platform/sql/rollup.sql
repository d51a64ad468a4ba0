-- The rollup of rows by status (migrations 0015 and 0039): what `/v1/stats`, `tickwork
-- status` and the operations view count from, at a cost that does not grow with the backlog
-- or the history. Triggers append how many rows each workspace has of each type
-- (action_type_rows), and every finish appends what finished (action_finished_rows) and in
-- which ten minutes (action_finished_windows): the finalize for the rows it publishes, a
-- trigger for the others. These queries merge the deltas and read them. %(workspace_id)s
-- null means every workspace (the owner's connection).

-- name: rollup_compact_type_rows
-- The deltas the triggers appended, merged into one row per workspace and type. Deltas
-- appended meanwhile by other transactions are not in this snapshot and stay as they are.
with merged as (
    delete from action_type_rows r
    using (select workspace_id, action_type from action_type_rows
           group by workspace_id, action_type having count(*) > 1) g
    where r.workspace_id = g.workspace_id and r.action_type = g.action_type
    returning r.workspace_id, r.action_type, r.n
)
insert into action_type_rows (workspace_id, action_type, n)
select workspace_id, action_type, sum(n) from merged
group by workspace_id, action_type
having sum(n) <> 0

-- name: rollup_compact_finished_rows
with merged as (
    delete from action_finished_rows r
    using (select workspace_id, action_type, status, error_code from action_finished_rows
           group by workspace_id, action_type, status, error_code having count(*) > 1) g
    where r.workspace_id = g.workspace_id and r.action_type = g.action_type
      and r.status = g.status and r.error_code = g.error_code
    returning r.workspace_id, r.action_type, r.status, r.error_code, r.n
)
insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
select workspace_id, action_type, status, error_code, sum(n) from merged
group by workspace_id, action_type, status, error_code
having sum(n) <> 0

-- name: rollup_drop_old_windows
-- Ten-minute counts older than the windows that read them, gone (the totals keep them).
delete from action_finished_windows where bucket < %(keep_after)s

-- name: rollup_compact_windows
-- One row per workspace, type, status, error code and ten minutes.
with merged as (
    delete from action_finished_windows r
    using (select workspace_id, action_type, status, error_code, bucket
           from action_finished_windows
           group by workspace_id, action_type, status, error_code, bucket
           having count(*) > 1) g
    where r.workspace_id = g.workspace_id and r.action_type = g.action_type
      and r.status = g.status and r.error_code = g.error_code and r.bucket = g.bucket
    returning r.workspace_id, r.action_type, r.status, r.error_code, r.bucket, r.n
)
insert into action_finished_windows (workspace_id, action_type, status, error_code, bucket, n)
select workspace_id, action_type, status, error_code, bucket, sum(n) from merged
group by workspace_id, action_type, status, error_code, bucket

-- name: rollup_counts
-- Rows by status and type, in one snapshot: finished = what finished (the deltas);
-- submitted live, along each type's range of the queue's due index up to now +
-- claimed_due_within (a row is claimed only when due within the clock-skew tolerance);
-- queued = rows - submitted - finished.
with finished as (
    select action_type, status, sum(n) as n
    from action_finished_rows
    where %(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s
    group by action_type, status
),
types as (
    select distinct action_type from action_type_rows
    where %(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s
),
submitted as (
    select q.action_type, 'submitted'::text as status, count(*) as n
    from types t
    join action_queue q on q.action_type = t.action_type
    join scheduled_actions a on a.id = q.id and a.workspace_id = q.workspace_id
    where q.due_at <= now() + make_interval(secs => %(claimed_due_within)s)
      and a.status = 'submitted'
      and (%(workspace_id)s::uuid is null or q.workspace_id = %(workspace_id)s)
    group by q.action_type
),
queued as (
    select t.action_type, 'queued'::text as status,
           t.n - coalesce(s.n, 0) - coalesce(f.n, 0) as n
    from (select action_type, sum(n) as n from action_type_rows
          where %(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s
          group by action_type) t
    left join submitted s using (action_type)
    left join (select action_type, sum(n) as n from finished group by action_type) f
        using (action_type)
),
counts as (
    select status, action_type, n from finished
    union all select status, action_type, n from submitted
    union all select status, action_type, n from queued
)
select status, action_type, n::bigint as count
from counts
where n <> 0
order by status, action_type

-- name: rollup_needs_person
-- Failed rows waiting for a person (stuck, ambiguous: the provider may have them).
select coalesce(sum(n) filter (where error_code = 'stuck'), 0)::bigint as stuck,
       coalesce(sum(n) filter (where error_code = 'ambiguous'), 0)::bigint as ambiguous
from action_finished_rows
where status = 'failed' and error_code in ('stuck', 'ambiguous')
  and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)

-- name: rollup_finished_between
-- What finished in the ten-minute buckets from the one %(start)s is in to the one %(stop)s
-- is in, per action type, status and error code ('' for none).
select action_type, status, error_code, sum(n)::bigint as count
from action_finished_windows
where bucket >= tickwork_finish_bucket(%(start)s) and bucket <= %(stop)s
  and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
group by action_type, status, error_code
having sum(n) <> 0
order by action_type, status, error_code
