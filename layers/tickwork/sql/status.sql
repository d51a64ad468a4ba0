-- What `tickwork status` shows an operator: across workspaces (the owner's connection),
-- or one workspace when %(workspace_id)s is set. Not hot paths: run by hand.

-- name: status_backlog
-- Queued rows per action type: how many, how many already due, the oldest due and the next.
select action_type,
       count(*) as queued,
       count(*) filter (where coalesce(next_attempt_at, publish_at) <= now()) as due,
       extract(epoch from now() - min(coalesce(next_attempt_at, publish_at))
           filter (where coalesce(next_attempt_at, publish_at) <= now()))::float8
           as oldest_due_age_seconds,
       min(coalesce(next_attempt_at, publish_at))
           filter (where coalesce(next_attempt_at, publish_at) > now()) as next_due
from scheduled_actions
where status = 'queued'
  and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
group by action_type
order by action_type

-- name: status_lag
-- How late rows due in the window were claimed (claim time - publish_at, ms), per action
-- type and overall (action_type null), as /v1/stats measures it.
select action_type, count(*) as sample,
       percentile_cont(0.5) within group (
           order by extract(epoch from submitted_at - publish_at) * 1000) as p50,
       percentile_cont(0.99) within group (
           order by extract(epoch from submitted_at - publish_at) * 1000) as p99
from scheduled_actions
where publish_at >= now() - make_interval(secs => %(window_seconds)s)
  and publish_at <= now()
  and submitted_at is not null
  and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
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
-- Rows waiting for a person: failed as stuck or ambiguous (the provider may have them; check
-- before retrying), and rows submitted longer than the stuck timeout (about to be).
select count(*) filter (where status = 'failed' and error_code = 'stuck') as stuck,
       count(*) filter (where status = 'failed' and error_code = 'ambiguous') as ambiguous,
       count(*) filter (
           where status = 'submitted'
             and submitted_at < now() - make_interval(secs => %(stuck_timeout_seconds)s)
       ) as submitted_too_long
from scheduled_actions
where status in ('failed', 'submitted')
  and (%(workspace_id)s::uuid is null or workspace_id = %(workspace_id)s)
