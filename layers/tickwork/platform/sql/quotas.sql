-- Per-workspace quotas: what a workspace holds, counted up to the limit and no further.

-- name: count_active_actions
-- Queued or submitted rows of the workspace (the queue holds exactly those), counted up to
-- %(cap)s (enough to decide) along ix_action_queue_workspace, so the walk stops at the cap.
select count(*) from (
    select 1 from action_queue
    where workspace_id = %(workspace_id)s
    order by due_at
    limit %(cap)s
) as active

-- name: count_live_schedules
select count(*) from recurring_schedules
where workspace_id = %(workspace_id)s and status <> 'ended'

-- name: count_api_request
-- One more request in the workspace's current window (a new window starts the count
-- again); returns the count and the seconds until the window ends.
insert into workspace_api_usage as usage (workspace_id, window_start, requests)
values (%(workspace_id)s, date_bin(make_interval(secs => %(window)s), now(),
                                   timestamptz '2000-01-01'), 1)
on conflict (workspace_id) do update
set window_start = excluded.window_start,
    requests = case when usage.window_start = excluded.window_start
                    then usage.requests + 1 else 1 end
returning requests,
          extract(epoch from window_start + make_interval(secs => %(window)s) - now())::float8
              as seconds_left

-- name: count_actions_created
-- %(made)s more actions created in the workspace's current window (a new window starts the
-- count again); returns the count and the seconds until the window ends. It runs in the
-- request's transaction, so a request refused (or failing) rolls its count back with its
-- rows, and the row lock it takes is held only from here to that commit.
insert into workspace_action_usage as usage (workspace_id, window_start, actions)
values (%(workspace_id)s, date_bin(make_interval(secs => %(window)s), now(),
                                   timestamptz '2000-01-01'), %(made)s)
on conflict (workspace_id) do update
set window_start = excluded.window_start,
    actions = case when usage.window_start = excluded.window_start
                   then usage.actions + excluded.actions else excluded.actions end
returning actions,
          extract(epoch from window_start + make_interval(secs => %(window)s) - now())::float8
              as seconds_left

-- name: count_rules
-- The workspace's rules not deleted (few: the quota bounds them), through ix_rules_workspace.
select count(*) from rules
where workspace_id = %(workspace_id)s and deleted_at is null

-- name: count_event_rules
-- The enabled rules one event type fires, through ix_rules_event.
select count(*) from rules
where workspace_id = %(workspace_id)s and trigger_type = 'event'
  and event_type = %(event_type)s and enabled and deleted_at is null

-- name: count_recipients
-- The workspace's recipients, counted up to %(cap)s through the primary key.
select count(*) from (
    select 1 from recipients where workspace_id = %(workspace_id)s limit %(cap)s
) as held

-- name: count_suppressions
-- The workspace's suppression-list entries, counted up to %(cap)s through the primary key.
select count(*) from (
    select 1 from suppressions where workspace_id = %(workspace_id)s limit %(cap)s
) as held

-- name: count_open_digests
-- The workspace's digests still collecting (open, their action still queued: a digest
-- whose action a dispatcher took is closed by its group's next item), counted up to
-- %(cap)s along ux_digests_open, and only when one of the actions %(created)s (this
-- request's) is a digest's: an event that opened none is not held to the quota.
select count(*) from (
    select 1 from digests d
    join scheduled_actions a on a.workspace_id = d.workspace_id and a.id = d.action_id
    where d.workspace_id = %(workspace_id)s and d.status = 'open' and a.status = 'queued'
      and exists (select 1 from digests n
                  where n.workspace_id = %(workspace_id)s
                    and n.action_id = any(%(created)s::uuid[]))
    limit %(cap)s
) as held

-- name: workspace_limits
-- The limits an operator set for a workspace (the API reads them with the membership).
select limits from workspaces where id = %(workspace_id)s

-- name: set_workspace_limits
-- Set some of a workspace's limits and clear others (back to the stack's defaults).
update workspaces
set limits = (limits - %(reset)s::text[]) || %(set)s
where id = %(workspace_id)s
returning limits
