-- Workspaces, members and the API's view of the caller.

-- name: set_tenant
-- Inside a transaction: act as the API role, scoped to one workspace (row-level security).
-- tickwork.actor names the caller in the change log.
select set_config('role', 'tickwork_api', true),
       set_config('tickwork.workspace_id', %(workspace_id)s::text, true),
       set_config('tickwork.actor', coalesce(%(actor)s::text, ''), true)

-- name: caller_membership
-- Row-level security already limits this to the current workspace. The workspace's limits
-- come along: the request's quotas need them, without a round trip of their own.
select m.role, w.timezone, w.limits
from workspace_members m
join workspaces w on w.id = m.workspace_id
where m.user_id = %(user_id)s

-- name: get_workspace
select id, name, timezone, settings, retention_days, legal_hold, created_at, updated_at
from workspaces
where id = tickwork_current_workspace()

-- name: update_workspace
update workspaces
set name = coalesce(%(name)s, name),
    timezone = coalesce(%(timezone)s, timezone),
    settings = coalesce(%(settings)s, settings),
    -- null is a value here (back to the stack's retention), so it is set when named
    retention_days = case when %(set_retention)s then %(retention_days)s::int
                          else retention_days end,
    legal_hold = coalesce(%(legal_hold)s, legal_hold)
where id = tickwork_current_workspace()
returning id, name, timezone, settings, retention_days, legal_hold, created_at, updated_at

-- name: find_workspace
select id from workspaces where id::text = %(key)s or name = %(key)s order by created_at limit 1

-- name: create_workspace
insert into workspaces (name, timezone) values (%(name)s, %(timezone)s) returning id

-- name: upsert_member
insert into workspace_members (workspace_id, user_id, role)
values (%(workspace_id)s, %(user_id)s, %(role)s)
on conflict (workspace_id, user_id) do update set role = excluded.role
