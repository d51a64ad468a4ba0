-- Bounded history (issue 39): finished rows older than a workspace's retention leave the
-- hot tables, archived first (tickwork.engine.retention, docs/retention.md).
--
-- retention_days: the workspace's own retention (null: the stack's TICKWORK_RETENTION_DAYS).
-- legal_hold: while true nothing of the workspace is removed, whatever its age.
-- Both are set by an admin through PATCH /v1/workspace (the API's column grant below).
alter table workspaces
    add column retention_days integer
        constraint workspaces_retention_days_range check (retention_days between 7 and 3650),
    add column legal_hold boolean not null default false;

grant update (retention_days, legal_hold) on workspaces to tickwork_api;

-- The removal's walk: one workspace's finished rows, oldest first. The global
-- ix_scheduled_actions_finished would make it read every workspace's rows older than the
-- cutoff to find one workspace's. Rows enter it only when they finish (no write on the
-- claim; the finalize already writes ix_scheduled_actions_finished).
create index if not exists ix_scheduled_actions_retention on scheduled_actions
    (workspace_id, finished_at, id)
    where finished_at is not null;

-- A row another row was rescheduled from stays while that row does (the lineage's foreign
-- key): the removal asks, for each candidate, whether such a row exists.
create index if not exists ix_scheduled_actions_rescheduled_from on scheduled_actions
    (rescheduled_from)
    where rescheduled_from is not null;
