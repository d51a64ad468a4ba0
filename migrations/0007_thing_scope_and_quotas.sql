-- A thing id is the app's own id, scoped to its workspace: two workspaces may both have a
-- "post-1", each with its own intent, rows and gates. The key of schedule_intents stays
-- (workspace_id, thing_id); the index that made ids unique across workspaces goes, so
-- another workspace's id is never an existence oracle (it is simply not found here).
drop index if exists ux_schedule_intents_thing;

-- Per-workspace quotas. Active actions are counted on the writes that add them, through
-- this index (a few entries per workspace row, only while a row is queued or submitted).
create index ix_scheduled_actions_active_workspace on scheduled_actions (workspace_id)
    where status in ('queued', 'submitted');

-- API requests per workspace in the current one-minute window: one row per workspace,
-- counted in a short transaction of its own before the request's (so a request that fails
-- still counts).
create table workspace_api_usage (
    workspace_id  uuid primary key references workspaces (id) on delete cascade,
    window_start  timestamptz not null,
    requests      integer not null check (requests >= 0)
);

grant select, insert, update on workspace_api_usage to tickwork_api;
alter table workspace_api_usage enable row level security;
create policy workspace_api_usage_tenant on workspace_api_usage to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());
