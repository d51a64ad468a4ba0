-- Per-workspace quotas: what a workspace holds, counted up to the limit and no further.

-- name: count_active_actions
-- Queued or submitted rows of the workspace, counted up to %(cap)s (enough to decide), in
-- the order of ix_scheduled_actions_active_workspace, so the walk stops at the cap.
select count(*) from (
    select 1 from scheduled_actions
    where workspace_id = %(workspace_id)s and finished_at is null
    order by coalesce(next_attempt_at, publish_at)
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
