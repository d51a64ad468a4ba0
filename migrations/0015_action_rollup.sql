-- Counts by status that cost the same at 10k rows and at 10M (issue 11): `/v1/stats` and
-- `tickwork status` read a rollup instead of every row of a workspace.
--
-- For each workspace and action type:
--   rows      how many rows exist: kept exact by statement-level triggers on insert and
--             delete, which append one delta row per statement and type (no counter row is
--             updated, so concurrent writers never wait on one another);
--   finished  rows published, failed or cancelled with finished_at before the watermark:
--             the reconciler advances the watermark and adds what finished up to it; rows
--             finished since are counted live through ix_scheduled_actions_finished;
--   submitted counted live (rows in flight: few);
--   queued    rows - submitted - finished.
-- The dispatch hot path (claim: queued -> submitted; finalize: submitted -> published,
-- failed or queued) writes none of this: a row that finishes gets finished_at = now(),
-- which is never before a watermark the reconciler may set (rollup_safe_mark holds it
-- behind every open transaction). Only a row leaving a counted finished state (a manual
-- retry: failed -> queued) or inserted or deleted already finished touches the rollup,
-- through the triggers below.

-- The live tail of finished rows (since the watermark), and `tickwork status`'s outcomes
-- of the last hour. Rows enter it only when they finish.
create index ix_scheduled_actions_finished on scheduled_actions (finished_at)
    where finished_at is not null;

create table action_type_rows (
    workspace_id  uuid not null references workspaces (id) on delete cascade,
    action_type   text not null,
    n             bigint not null
);
create index ix_action_type_rows_workspace on action_type_rows (workspace_id, action_type);

create table action_finished_rows (
    workspace_id  uuid not null references workspaces (id) on delete cascade,
    action_type   text not null,
    status        text not null check (status in ('published', 'failed', 'cancelled')),
    -- '' for none: `tickwork status` counts the failures waiting for a person by code.
    error_code    text not null,
    n             bigint not null
);
create index ix_action_finished_rows_workspace on action_finished_rows
    (workspace_id, action_type, status, error_code);

-- One row (or none: nothing rolled up yet, the watermark is -infinity).
create table action_rollup_watermark (
    singleton        boolean primary key default true check (singleton),
    finished_before  timestamptz not null,
    advanced_at      timestamptz not null default now()
);

-- The reconciler advances under this lock taken exclusive; a trigger that reads the watermark
-- takes it shared, so it sees either the watermark before an advance (and the advance then
-- sees its rows) or the one after.
create function tickwork_rollup_watermark() returns timestamptz
language sql volatile as $$
    select pg_advisory_xact_lock_shared(hashtextextended('tickwork.action_rollup', 0));
    select coalesce((select finished_before from action_rollup_watermark), '-infinity');
$$;

-- Taken by the reconciler's advance (exclusive, until its transaction ends). A function, so
-- the statement RDS Proxy sees is a plain select of a transaction-scoped lock.
create function tickwork_rollup_lock() returns void
language sql volatile as $$
    select pg_advisory_xact_lock(hashtextextended('tickwork.action_rollup', 0));
$$;

-- Only the owner (and the triggers, which run as the owner) takes these locks.
revoke execute on function tickwork_rollup_watermark(), tickwork_rollup_lock() from public;

-- Security definer: the API inserts rows and retries them as tickwork_api, which may not write
-- the rollup itself. The rows counted are the statement's own.
create function tickwork_rollup_insert() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    mark timestamptz;
begin
    insert into action_type_rows (workspace_id, action_type, n)
    select workspace_id, action_type, count(*) from inserted group by workspace_id, action_type;
    if exists (select 1 from inserted where finished_at is not null) then
        mark := tickwork_rollup_watermark();
        insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
        select workspace_id, action_type, status, coalesce(error_code, ''), count(*)
        from inserted
        where finished_at < mark
        group by workspace_id, action_type, status, coalesce(error_code, '');
    end if;
    return null;
end;
$$;

-- A workspace being deleted takes its rollup with it (on delete cascade): nothing to add.
create function tickwork_rollup_delete() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    mark timestamptz;
begin
    insert into action_type_rows (workspace_id, action_type, n)
    select d.workspace_id, d.action_type, -count(*) from deleted d
    where exists (select 1 from workspaces w where w.id = d.workspace_id)
    group by d.workspace_id, d.action_type;
    if exists (select 1 from deleted where finished_at is not null) then
        mark := tickwork_rollup_watermark();
        insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
        select d.workspace_id, d.action_type, d.status, coalesce(d.error_code, ''), -count(*)
        from deleted d
        where d.finished_at < mark
          and exists (select 1 from workspaces w where w.id = d.workspace_id)
        group by d.workspace_id, d.action_type, d.status, coalesce(d.error_code, '');
    end if;
    return null;
end;
$$;

-- Per row, but only for rows leaving (or changing) a finished state, or changing workspace or
-- type: the WHEN clause is false for every claim and finalize.
create function tickwork_rollup_update() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    mark timestamptz;
begin
    if (old.workspace_id, old.action_type) is distinct from (new.workspace_id, new.action_type)
    then
        insert into action_type_rows (workspace_id, action_type, n)
        values (old.workspace_id, old.action_type, -1), (new.workspace_id, new.action_type, 1);
    end if;
    if old.finished_at is not null or new.finished_at is not null then
        mark := tickwork_rollup_watermark();
        if old.finished_at < mark then
            insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
            values (old.workspace_id, old.action_type, old.status, coalesce(old.error_code, ''),
                    -1);
        end if;
        if new.finished_at < mark then
            insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
            values (new.workspace_id, new.action_type, new.status, coalesce(new.error_code, ''),
                    1);
        end if;
    end if;
    return null;
end;
$$;

-- After a truncate there is nothing to count.
create function tickwork_rollup_truncate() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    delete from action_type_rows;
    delete from action_finished_rows;
    delete from action_rollup_watermark;
    return null;
end;
$$;

create trigger scheduled_actions_rollup_insert
    after insert on scheduled_actions
    referencing new table as inserted
    for each statement execute function tickwork_rollup_insert();

create trigger scheduled_actions_rollup_delete
    after delete on scheduled_actions
    referencing old table as deleted
    for each statement execute function tickwork_rollup_delete();

create trigger scheduled_actions_rollup_update
    after update on scheduled_actions
    for each row
    when ((old.workspace_id, old.action_type) is distinct from (new.workspace_id, new.action_type)
          or old.finished_at is not null
             and (old.status, old.finished_at, old.error_code)
                 is distinct from (new.status, new.finished_at, new.error_code))
    execute function tickwork_rollup_update();

create trigger scheduled_actions_rollup_truncate
    after truncate on scheduled_actions
    for each statement execute function tickwork_rollup_truncate();

-- The rows already here: counted now, under the triggers' table lock (no insert or delete can
-- slip between). Finished ones are left to the first advance (the watermark is -infinity).
insert into action_type_rows (workspace_id, action_type, n)
select workspace_id, action_type, count(*) from scheduled_actions
group by workspace_id, action_type;

-- The API reads its own workspace's rollup; the watermark is one instant, no tenant's data.
grant select on action_type_rows, action_finished_rows, action_rollup_watermark to tickwork_api;
alter table action_type_rows enable row level security;
create policy action_type_rows_tenant on action_type_rows to tickwork_api
    using (workspace_id = tickwork_current_workspace());
alter table action_finished_rows enable row level security;
create policy action_finished_rows_tenant on action_finished_rows to tickwork_api
    using (workspace_id = tickwork_current_workspace());
