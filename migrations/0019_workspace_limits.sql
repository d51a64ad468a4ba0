-- Per-workspace limits an operator sets (`tickwork workspace limits`): a quota's name →
-- a whole number from 0 (no limit) up; a quota not named takes the stack's default
-- (TICKWORK_QUOTA_*). The API reads them with the caller's membership and cannot change
-- them: its column grant on workspaces (0002) names only name, timezone and settings.
alter table workspaces add column limits jsonb not null default '{}'::jsonb
    constraint workspaces_limits_valid check (
        jsonb_typeof(limits) = 'object'
        and not jsonb_path_exists(
            limits,
            'strict $.* ? (@.type() != "number" || @ < 0 || @ > 2147483647 || @ != @.floor())'
        )
    );

-- Actions a workspace's API requests created in the current one-minute window: one row per
-- workspace, written in the request's own transaction before it commits, so a request
-- refused for the rate (or failing) leaves neither its rows nor its count.
create table workspace_action_usage (
    workspace_id  uuid primary key references workspaces (id) on delete cascade,
    window_start  timestamptz not null,
    actions       integer not null check (actions >= 0)
);

grant select, insert, update on workspace_action_usage to tickwork_api;
alter table workspace_action_usage enable row level security;
create policy workspace_action_usage_tenant on workspace_action_usage to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());
