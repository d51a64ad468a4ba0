-- Drip steps that collect (a `digest`) or are limited per key (`limit`), and per-key
-- limits shared by rules and steps.

-- Shared per-key windows: the same as a rule's own (rule_key_windows), but per workspace
-- and key, so that every rule and drip step whose limit is shared and names the same key
-- (by default the recipient) counts in one window. A window begins with the first action
-- given in it and lasts the `per_seconds` of the limit that began it; each limit compares
-- `taken` with its own `count`.
create table key_windows (
    workspace_id  uuid not null references workspaces (id) on delete cascade,
    key           text not null check (length(key) <= 500),
    window_start  timestamptz not null,
    window_end    timestamptz not null,
    taken         integer not null check (taken >= 1),
    primary key (workspace_id, key)
);

-- Ended windows of a workspace go a few at a time, as its keys are taken.
create index ix_key_windows_end on key_windows (workspace_id, window_end);

grant select, insert, update, delete on key_windows to tickwork_api;
alter table key_windows enable row level security;
create policy key_windows_tenant on key_windows to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

-- An enrollment waiting for a step that is decided when it is due (a step with a digest or
-- a limit makes no action in advance): no current action, `next_send_at` the step's time.
-- The drip advance's way in.
create index ix_enrollments_waiting on enrollments (next_send_at)
    where status = 'active' and current_action_id is null and next_send_at is not null;
