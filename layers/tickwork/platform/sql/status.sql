-- What `tickwork status` shows an operator: across workspaces (the owner's connection),
-- or one workspace when %(workspace_id)s is set. Not hot paths: run by hand.

-- name: status_due
-- Queued rows already due per action type, along each type's range of the queue (rows not
-- finished, by due time): small unless something is behind. Each type's walk stops after
-- %(due_cap)s rows; `capped` says it stopped (`due` is then a lower bound).
with types as (
    select distinct action_type from action_type_rows
    where %(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s
),
due as (
    select t.action_type, d.due_at
    from types t
    cross join lateral (
        select q.due_at
        from action_queue q
        join scheduled_actions a on a.id = q.id and a.workspace_id = q.workspace_id
        where q.action_type = t.action_type and q.due_at <= now()
          and a.status = 'queued'
          and (%(workspace_id)s::uuid is null or q.workspace_id = %(workspace_id)s)
        order by q.due_at, q.id
        limit %(due_cap)s + 1
    ) d
)
select action_type, least(count(*), %(due_cap)s) as due,
       extract(epoch from now() - min(due_at))::float8 as oldest_due_age_seconds,
       count(*) > %(due_cap)s as capped
from due
group by action_type

-- name: status_next_due
-- The next queued row to fall due, per action type: the first one along the type's range of
-- the queue (a walk that ends at once unless the type's next rows are all in flight).
select t.action_type,
    (select q.due_at from action_queue q
     join scheduled_actions a on a.id = q.id and a.workspace_id = q.workspace_id
     where q.action_type = t.action_type and q.due_at > now()
       and a.status = 'queued'
       and (%(workspace_id)s::uuid is null or q.workspace_id = %(workspace_id)s)
     order by q.due_at, q.id limit 1) as next_due
from unnest(%(action_types)s::text[]) as t (action_type)

-- name: status_lag
-- How late rows due in the window were claimed (claim time - publish_at, ms), per action
-- type and overall (action_type null), as /v1/stats measures it.
select action_type, count(*) as sample,
       percentile_cont(0.5) within group (
           order by extract(epoch from submitted_at - publish_at) * 1000) as p50,
       percentile_cont(0.99) within group (
           order by extract(epoch from submitted_at - publish_at) * 1000) as p99
from workspaces w
-- Each workspace's window along the calendar index (no index has publish_at first); offset 0
-- keeps the planner from merging this into a scan of every row.
cross join lateral (
    select action_type, publish_at, submitted_at from scheduled_actions a
    where a.workspace_id = w.id
      and publish_at >= now() - make_interval(secs => %(window_seconds)s)
      and publish_at <= now()
      and submitted_at is not null
    offset 0
) a
where %(workspace_id)s::uuid is null or w.id = %(workspace_id)s
group by grouping sets ((action_type), ())
order by action_type nulls first

-- name: status_attention
-- Rows submitted longer than the stuck timeout (about to be failed as stuck), along each
-- type's range of the queue up to now + due_within (a row is claimed only when due within
-- the clock-skew tolerance). The failures waiting for a person come from the rollup.
select count(*) as submitted_too_long
from (select distinct action_type from action_type_rows
      where %(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s) t
join action_queue q on q.action_type = t.action_type
join scheduled_actions a on a.id = q.id and a.workspace_id = q.workspace_id
where q.due_at <= now() + make_interval(secs => %(due_within)s)
  and a.status = 'submitted'
  and a.submitted_at < now() - make_interval(secs => %(stuck_timeout_seconds)s)
  and (%(workspace_id)s::uuid is null or q.workspace_id = %(workspace_id)s)
