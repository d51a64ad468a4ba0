-- The rollup of rows by status (migration 0015): what `/v1/stats` and `tickwork status` count
-- from, at a cost that does not grow with the backlog. %(workspace_id)s null means every
-- workspace (the owner's connection).

-- name: rollup_mark
select finished_before from action_rollup_watermark

-- name: rollup_lock
-- Exclusive against the triggers' shared lock (tickwork_rollup_watermark()).
select tickwork_rollup_lock()

-- name: rollup_safe_mark
-- The furthest the watermark may go: a row finishes with finished_at = now() of its
-- transaction, so no row can still appear finished before the start of the oldest open
-- transaction. A session this role may not see (another role's, without pg_read_all_stats)
-- could be one: then the watermark stays blind_margin behind.
select least(
    now() - make_interval(secs => %(margin)s),
    (select min(xact_start) from pg_stat_activity
     where datname = current_database() and backend_type = 'client backend'
       and pid <> pg_backend_pid()),
    (select now() - make_interval(secs => %(blind_margin)s) from pg_stat_activity
     where datname = current_database() and query = '<insufficient privilege>' limit 1)
)

-- name: rollup_add_finished
-- Rows finished between the old watermark (null: the beginning) and the new one.
insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
select workspace_id, action_type, status, coalesce(error_code, ''), count(*)
from scheduled_actions
where finished_at < %(mark)s
  and (%(previous)s::timestamptz is null or finished_at >= %(previous)s)
group by workspace_id, action_type, status, coalesce(error_code, '')

-- name: rollup_set_mark
insert into action_rollup_watermark (finished_before, advanced_at) values (%(mark)s, now())
on conflict (singleton) do update
set finished_before = excluded.finished_before, advanced_at = excluded.advanced_at

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

-- name: rollup_counts
-- Rows by status and type, in one snapshot: finished = the rollup before the watermark plus
-- the rows finished since (through ix_scheduled_actions_finished); submitted live (along
-- ix_scheduled_actions_due up to now + claimed_due_within: a row is claimed only when due
-- within the clock-skew tolerance, and leaves the index when it finishes);
-- queued = rows - submitted - finished. %(mark)s is the watermark the caller read just
-- before; the row's `mark` is the one this snapshot saw, and when they differ the caller
-- reads again (an advance committed between the two).
with finished as (
    select action_type, status, sum(n) as n
    from (
        select action_type, status, n from action_finished_rows
        where %(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s
        union all
        select action_type, status, count(*) from scheduled_actions
        where (%(mark)s::timestamptz is null and finished_at is not null
               or finished_at >= %(mark)s)
          and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
        group by action_type, status
    ) f
    group by action_type, status
),
submitted as (
    select action_type, 'submitted'::text as status, count(*) as n
    from scheduled_actions
    where finished_at is null and status = 'submitted'
      and coalesce(next_attempt_at, publish_at)
          <= now() + make_interval(secs => %(claimed_due_within)s)
      and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
    group by action_type
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
select c.status, c.action_type, c.n::bigint as count, m.mark
from (select (select finished_before from action_rollup_watermark) as mark) m
left join counts c on c.n <> 0
order by c.status, c.action_type

-- name: rollup_needs_person
-- Failed rows waiting for a person (stuck, ambiguous: the provider may have them), from the
-- rollup before the watermark and live after it, in one snapshot as rollup_counts.
select coalesce(sum(n) filter (where error_code = 'stuck'), 0)::bigint as stuck,
       coalesce(sum(n) filter (where error_code = 'ambiguous'), 0)::bigint as ambiguous,
       (select finished_before from action_rollup_watermark) as mark
from (
    select error_code, n from action_finished_rows
    where status = 'failed' and error_code in ('stuck', 'ambiguous')
      and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
    union all
    select error_code, 1 from scheduled_actions
    where (%(mark)s::timestamptz is null and finished_at is not null
           or finished_at >= %(mark)s)
      and status = 'failed' and error_code in ('stuck', 'ambiguous')
      and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
) f
