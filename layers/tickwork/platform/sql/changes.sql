-- The change log and the forecast.

-- name: changes_of_action
select * from action_changes
where workspace_id = %(workspace_id)s and action_id = %(action_id)s
order by id

-- name: list_changes
select * from action_changes
where workspace_id = %(workspace_id)s
  and (%(after)s::bigint is null or id > %(after)s)
  and (%(kind)s::text is null or kind = %(kind)s)
  and (%(enrollment_id)s::uuid is null or enrollment_id = %(enrollment_id)s)
order by id
limit %(limit)s

-- name: forecast
-- Queued actions due per action type, connection and hour over the next hours (the current hour
-- also holds what is already due). A row's due time is never before its publish_at, so
-- the calendar index bounds the scan.
select action_type, connection_id,
       date_trunc('hour', greatest(coalesce(next_attempt_at, publish_at), %(now)s)) as hour,
       count(*) as due
from scheduled_actions
where workspace_id = %(workspace_id)s
  and publish_at < %(until)s
  and status = 'queued'
  and coalesce(next_attempt_at, publish_at) < %(until)s
group by 1, 2, 3
order by 3, 1, 2 nulls first
