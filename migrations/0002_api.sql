-- Row-level security for the HTTP API.
--
-- The API runs each request in one transaction as the role tickwork_api, with the caller's
-- workspace in the setting tickwork.workspace_id; the policies below let that role see and
-- write only that workspace's rows, whatever a query forgets to filter. Workers (tick,
-- dispatchers, expander, reconciler) connect as the owner of the tables, which bypasses
-- row-level security.

do $$
begin
    create role tickwork_api nologin;
exception when duplicate_object then
    null;  -- roles are per cluster: another database on this server made it already
end;
$$;

-- The connecting user switches to tickwork_api per transaction (SET LOCAL ROLE), which
-- needs membership; on RDS the master user is not a superuser.
do $$
begin
    execute format('grant tickwork_api to %I', current_user);
exception when others then
    null;  -- already a member, or a superuser who needs no grant
end;
$$;

create function tickwork_current_workspace() returns uuid
language sql stable as $$
    select nullif(current_setting('tickwork.workspace_id', true), '')::uuid
$$;

grant usage on schema public to tickwork_api;
grant select on workspaces to tickwork_api;
grant update (name, timezone, settings) on workspaces to tickwork_api;
grant select on workspace_members to tickwork_api;
grant select, insert, update on scheduled_actions to tickwork_api;

alter table workspaces enable row level security;
create policy workspaces_tenant on workspaces to tickwork_api
    using (id = tickwork_current_workspace())
    with check (id = tickwork_current_workspace());

alter table workspace_members enable row level security;
create policy workspace_members_tenant on workspace_members to tickwork_api
    using (workspace_id = tickwork_current_workspace());

alter table scheduled_actions enable row level security;
create policy scheduled_actions_tenant on scheduled_actions to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());
