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
-- also holds what is already due): the workspace's range of the queue (rows not finished, by
-- due time) up to the end of the forecast.
select q.action_type, a.connection_id,
       date_trunc('hour', greatest(q.due_at, %(now)s)) as hour,
       count(*) as due
from action_queue q
join scheduled_actions a on a.id = q.id and a.workspace_id = q.workspace_id
where q.workspace_id = %(workspace_id)s
  and q.due_at < %(until)s
  and a.status = 'queued'
group by 1, 2, 3
order by 3, 1, 2 nulls first
