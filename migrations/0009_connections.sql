-- Connections: a workspace's own provider accounts (an email server, an SMS account, a bot,
-- a social account, a webhook endpoint). Credentials are not here: they live in the secret
-- store (Secrets Manager in AWS), named by secret_ref. A deleted connection keeps its row
-- (status 'deleted') so actions that named it fail with a reason instead of losing it.

create table connections (
    id                 uuid primary key default gen_random_uuid(),
    workspace_id       uuid not null references workspaces (id) on delete cascade,
    name               text not null check (length(name) between 1 and 200),
    provider           text not null check (length(provider) between 1 and 63),
    settings           jsonb not null default '{}'::jsonb
                           check (jsonb_typeof(settings) = 'object'
                                  and octet_length(settings::text) <= 16384),
    secret_ref         text,
    status             text not null default 'active'
                           check (status in ('active', 'disabled', 'deleted')),
    verified_at        timestamptz,
    verify_ok          boolean,
    verify_message     text check (length(verify_message) <= 500),
    created_by         text,
    created_at         timestamptz not null default now(),
    updated_at         timestamptz not null default now(),
    deleted_at         timestamptz,
    constraint connections_deleted_when_deleted check ((status = 'deleted') = (deleted_at is not null))
);

-- One live connection per name in a workspace; deleted names may be reused.
create unique index ux_connections_name on connections (workspace_id, name)
    where status <> 'deleted';
create index ix_connections_workspace on connections (workspace_id, created_at, id);

create trigger connections_touch
    before update on connections
    for each row execute function tickwork_touch_updated_at();

alter table scheduled_actions add column connection_id uuid references connections (id);
create index ix_scheduled_actions_connection on scheduled_actions (connection_id)
    where connection_id is not null;

-- A recurring schedule's occurrences send through its connection.
alter table recurring_schedules add column connection_id uuid references connections (id);

grant select, insert, update on connections to tickwork_api;
alter table connections enable row level security;
create policy connections_tenant on connections to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());
