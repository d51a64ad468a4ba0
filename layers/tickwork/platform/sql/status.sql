-- What `tickwork status` shows an operator: across workspaces (the owner's connection),
-- or one workspace when %(workspace_id)s is set. Not hot paths: run by hand.

-- name: status_due
-- Queued rows already due per action type, along the due index (small unless something is
-- behind). How many are queued comes from the rollup. The walk goes in order and stops
-- after %(due_cap)s rows: without the limit the planner, whose estimate of "due before now"
-- counts finished history, may read the index of every active row instead (all of a big
-- future backlog). `capped` says it stopped.
with due as (
    select workspace_id, action_type, coalesce(next_attempt_at, publish_at) as due_at
    from scheduled_actions
    where status = 'queued' and finished_at is null
      and coalesce(next_attempt_at, publish_at) <= now()
      and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
    order by coalesce(next_attempt_at, publish_at), id
    limit %(due_cap)s + 1
)
select action_type, least(count(*), %(due_cap)s) as due,
       extract(epoch from now() - min(due_at))::float8 as oldest_due_age_seconds,
       (select count(*) from due) > %(due_cap)s as capped
from due
group by action_type

-- name: status_next_due
-- The next queued row to fall due, per action type: the first one along the due index that
-- has the type (a walk that ends at once unless a type is rare far ahead).
select t.action_type,
    (select coalesce(next_attempt_at, publish_at) from scheduled_actions
     where status = 'queued' and finished_at is null
       and coalesce(next_attempt_at, publish_at) > now()
       and action_type = t.action_type
       and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
     order by coalesce(next_attempt_at, publish_at) limit 1) as next_due
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

-- name: status_outcomes
-- Rows that reached published or failed in the window, per action type and error code.
select action_type, status, coalesce(error_code, '') as error_code, count(*) as count
from scheduled_actions
where finished_at >= now() - make_interval(secs => %(window_seconds)s)
  and status in ('published', 'failed')
  and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
group by action_type, status, error_code
order by action_type, status, error_code

-- name: status_attention
-- Rows submitted longer than the stuck timeout (about to be failed as stuck), along the due
-- index's range of claimed rows (a row is claimed only when due within the clock-skew
-- tolerance). The failures waiting for a person come from the rollup.
select count(*) as submitted_too_long
from scheduled_actions
where finished_at is null and status = 'submitted'
  and coalesce(next_attempt_at, publish_at) <= now() + make_interval(secs => %(due_within)s)
  and submitted_at < now() - make_interval(secs => %(stuck_timeout_seconds)s)
  and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
