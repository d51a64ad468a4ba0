-- The lean hot path (issue 48): the claim and the finalize are HOT updates of scheduled_actions
-- (no index of the table names a column either of them writes), and the tick writes nothing
-- per row. docs/benchmarks.md ("What an action costs") says what each statement writes.
--
-- What the indexes that named finished_at, status, error_code or provider_id did moves:
--   - the rows not finished (the tick's and the sweeps' due order, a workspace's backlog,
--     the one active row per thing and target) live in action_queue, a narrow table that
--     holds exactly the unfinished rows: a row enters when it is inserted (or retried) and
--     leaves when it finishes, which costs a delete, with no index entry written;
--   - how far the tick has handed rows to their queues is a watermark per action type
--     (tick_watermarks) instead of a mark on each row;
--   - what finished, and when, is counted as it finishes (action_finished_rows, and per ten
--     minutes action_finished_windows), not read back along an index on finished_at;
--   - a provider's message id, for its status callbacks, is kept in provider_messages by the
--     finalize, for rows sent through a connection;
--   - the resolver finds its candidates in the ledger (action_attempts), which records every
--     ambiguous and stuck attempt;
--   - the removal of old history walks a workspace's rows by due time (ix_scheduled_actions_
--     calendar): a row leaves when both its due time and its finish are past the retention.

-- ---------------------------------------------------------------- the unfinished rows

create table action_queue (
    id            uuid not null,
    workspace_id  uuid not null,
    action_type   text not null,
    -- coalesce(next_attempt_at, publish_at) of the row: when it is due.
    due_at        timestamptz not null,
    -- When a producer, a dispatcher or the lost-message sweep handed it to its queue; null
    -- when the tick's pass did (its type's watermark passed it) or nobody has yet.
    enqueued_at   timestamptz,
    -- Behind its type's watermark and handed to no queue (inserted or moved there after the
    -- tick's pass, or handed back by a dispatcher): the tick's next pass sends it.
    unsent        boolean not null default false,
    -- The one-active-row rule's key: set for a row of a thing that no schedule made.
    thing_id      text,
    target_key    text,
    -- What a bulk cancel by recipient or by tag looks for among the rows not finished.
    recipient_id  text,
    tags          text[] not null default '{}',
    primary key (id, workspace_id)
);
-- The tick's pass and the sweeps, per type in due order.
create index ix_action_queue_due on action_queue (action_type, due_at, id);
-- A workspace's backlog (quotas, the operations view, the forecast). With id last, a walk of
-- it for one workspace is in the tick's order too.
create index ix_action_queue_workspace on action_queue (workspace_id, due_at, id);
-- The rows the tick's next pass sends although they are behind the watermark: few.
create index ix_action_queue_unsent on action_queue (action_type, due_at, id) where unsent;
-- A recipient's and a tag's rows not finished (bulk cancels).
create index ix_action_queue_recipient on action_queue (workspace_id, recipient_id)
    where recipient_id is not null;
create index ix_action_queue_tags on action_queue using gin (tags) where cardinality(tags) > 0;
-- At most one active row per (workspace, action_type, thing_id, target_key), as before: the
-- index moves from scheduled_actions (where it named finished_at) and keeps the name the
-- API's conflict answer and the docs give.
drop index ux_scheduled_actions_active_thing_target;
create unique index ux_scheduled_actions_active_thing_target on action_queue
    (workspace_id, action_type, thing_id, target_key)
    where thing_id is not null;

-- ---------------------------------------------------------------- the tick's watermarks

-- Per action type, the last (due time, id) the tick's passes handed to its queue: every row
-- of the type at or before it that was committed when a pass read it is in a queue (or was
-- handed to one by whoever made or moved it). No row is written per row sent.
create table tick_watermarks (
    action_type  text primary key,
    due_at       timestamptz not null,
    id           uuid not null,
    advanced_at  timestamptz not null default now()
);

-- Each pass: up to which row of its type it sent, and when. A row behind the watermark was
-- handed to its queue by the first pass that reached it (when no one else did), at that
-- pass's time: how long ago tells a lost message from a row still waiting its turn, and
-- `why` says since when it waits. Kept a day (the tick deletes older passes); a row whose
-- pass is gone has waited longer than any timeout.
create table tick_passes (
    action_type  text not null,
    upto_due     timestamptz not null,
    upto_id      uuid not null,
    passed_at    timestamptz not null default now(),
    primary key (action_type, upto_due, upto_id)
);

-- When the tick's passes handed the row at (due_at, id) of its type to its queue: the time
-- of the first pass that reached it (null: none did, or it was longer ago than a day).
create function tickwork_passed_at(p_type text, p_due timestamptz, p_id uuid)
returns timestamptz
language sql stable as $$
    select p.passed_at from tick_passes p
    where p.action_type = p_type and (p.upto_due, p.upto_id) >= (p_due, p_id)
    order by p.upto_due, p.upto_id
    limit 1
$$;

-- The watermarks and passes are instants per type, no tenant's data: `why` reads them as the
-- API.
grant select on tick_watermarks, tick_passes to tickwork_api;

-- Whether a row due at (due_at, id) of its type is at or behind the tick's watermark: then
-- the tick's passes are past it, and it is sent by whoever makes or moves it, or by the
-- tick's next pass as `unsent`.
create function tickwork_behind_watermark(p_type text, p_due timestamptz, p_id uuid)
returns boolean
language sql stable as $$
    select coalesce(
        (select (p_due, p_id) <= (w.due_at, w.id) from tick_watermarks w
         where w.action_type = p_type),
        false)
$$;

-- ---------------------------------------------------------------- providers' message ids

-- The message id a provider gave a published row sent through a connection: its status
-- callbacks name it. Written by the finalize for those rows only (and by the resolver).
create table provider_messages (
    connection_id  uuid not null,
    message_id     text not null check (length(message_id) between 1 and 2000),
    workspace_id   uuid not null,
    action_id      uuid not null,
    primary key (connection_id, message_id, workspace_id)
);
create index ix_provider_messages_action on provider_messages (action_id);

insert into provider_messages (connection_id, message_id, workspace_id, action_id)
select connection_id, provider_id, workspace_id, id from scheduled_actions
where provider_id is not null and connection_id is not null and status = 'published'
on conflict do nothing;

grant select, insert on provider_messages to tickwork_api;
alter table provider_messages enable row level security;
create policy provider_messages_tenant on provider_messages to tickwork_api
    using (workspace_id = tickwork_current_workspace());

-- ---------------------------------------------------------------- finished rows, counted

-- Every finish is counted as it happens: in the totals (action_finished_rows, as deltas the
-- rollup merges; no watermark any more) and in the ten minutes it happened in
-- (action_finished_windows, positive counts kept three days: the operations view and
-- `tickwork status` read windows of them). A correction (a finished row that changes) moves
-- the totals and counts its new state in its window. Rows finished since the old watermark
-- were not counted yet: they are now.
insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
select workspace_id, action_type, status, coalesce(error_code, ''), count(*)
from scheduled_actions
where finished_at is not null
  and finished_at >= coalesce((select finished_before from action_rollup_watermark),
                              '-infinity')
group by workspace_id, action_type, status, coalesce(error_code, '');

create table action_finished_windows (
    workspace_id  uuid not null references workspaces (id) on delete cascade,
    action_type   text not null,
    status        text not null check (status in ('published', 'failed', 'cancelled')),
    error_code    text not null,
    -- The start of the ten minutes (date_bin from 2000-01-01 UTC) the rows finished in.
    bucket        timestamptz not null,
    n             bigint not null
);
create index ix_action_finished_windows_workspace on action_finished_windows
    (workspace_id, bucket);
create index ix_action_finished_windows_bucket on action_finished_windows (bucket);

-- The ten minutes an instant is in.
create function tickwork_finish_bucket(at timestamptz) returns timestamptz
language sql immutable parallel safe as $$
    select date_bin('10 minutes', at, timestamptz '2000-01-01 00:00:00+00')
$$;

insert into action_finished_windows (workspace_id, action_type, status, error_code, bucket, n)
select workspace_id, action_type, status, coalesce(error_code, ''),
       tickwork_finish_bucket(finished_at), count(*)
from scheduled_actions
where finished_at >= now() - interval '3 days'
group by workspace_id, action_type, status, coalesce(error_code, ''),
         tickwork_finish_bucket(finished_at);

grant select on action_finished_windows to tickwork_api;
alter table action_finished_windows enable row level security;
create policy action_finished_windows_tenant on action_finished_windows to tickwork_api
    using (workspace_id = tickwork_current_workspace());

drop trigger scheduled_actions_rollup_insert on scheduled_actions;
drop trigger scheduled_actions_rollup_delete on scheduled_actions;
drop trigger scheduled_actions_rollup_update on scheduled_actions;
drop trigger scheduled_actions_rollup_truncate on scheduled_actions;
drop function tickwork_rollup_insert();
drop function tickwork_rollup_delete();
drop function tickwork_rollup_update();
drop function tickwork_rollup_truncate();
drop function tickwork_rollup_lock();
drop function tickwork_rollup_watermark();
drop table action_rollup_watermark;

-- ---------------------------------------------------------------- the triggers that keep them

-- Rows inserted: counted, queued when not finished (behind the watermark: unsent), counted
-- finished (and a published one's message id kept) when inserted finished (a restore). Statement-level: one pass over the statement's
-- rows, whatever their number. Security definer: the API inserts as tickwork_api, which may
-- write neither table. A row of a thing whose active sibling exists breaks the queue's unique
-- index here, and the statement with it.
create function tickwork_actions_inserted() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    insert into action_type_rows (workspace_id, action_type, n)
    select workspace_id, action_type, count(*) from inserted group by workspace_id, action_type;
    insert into action_queue (id, workspace_id, action_type, due_at, unsent, thing_id,
                              target_key, recipient_id, tags)
    select i.id, i.workspace_id, i.action_type, coalesce(i.next_attempt_at, i.publish_at),
           coalesce((coalesce(i.next_attempt_at, i.publish_at), i.id) <= (w.due_at, w.id),
                    false),
           case when i.recurring_schedule_id is null then i.thing_id end,
           case when i.recurring_schedule_id is null and i.thing_id is not null
                then i.target_key end,
           i.recipient_id, i.tags
    from inserted i
    left join tick_watermarks w on w.action_type = i.action_type
    where i.finished_at is null;
    if exists (select 1 from inserted where finished_at is not null) then
        insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
        select workspace_id, action_type, status, coalesce(error_code, ''), count(*)
        from inserted
        where finished_at is not null
        group by workspace_id, action_type, status, coalesce(error_code, '');
        insert into action_finished_windows (workspace_id, action_type, status, error_code,
                                             bucket, n)
        select workspace_id, action_type, status, coalesce(error_code, ''),
               tickwork_finish_bucket(finished_at), count(*)
        from inserted
        where finished_at is not null
        group by workspace_id, action_type, status, coalesce(error_code, ''),
                 tickwork_finish_bucket(finished_at);
        insert into provider_messages (connection_id, message_id, workspace_id, action_id)
        select connection_id, provider_id, workspace_id, id from inserted
        where status = 'published' and connection_id is not null and provider_id is not null
        on conflict do nothing;
    end if;
    return null;
end;
$$;

-- Rows deleted (retention, a workspace's deletion): uncounted, out of the queue, their
-- providers' message ids forgotten (the archived row keeps them). A workspace
-- being deleted takes its counts with it (on delete cascade): nothing to subtract.
create function tickwork_actions_deleted() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    delete from action_queue q using deleted d
    where q.id = d.id and q.workspace_id = d.workspace_id and d.finished_at is null;
    delete from provider_messages m using deleted d
    where m.action_id = d.id and d.provider_id is not null and d.connection_id is not null;
    insert into action_type_rows (workspace_id, action_type, n)
    select d.workspace_id, d.action_type, -count(*) from deleted d
    where exists (select 1 from workspaces w where w.id = d.workspace_id)
    group by d.workspace_id, d.action_type;
    insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
    select d.workspace_id, d.action_type, d.status, coalesce(d.error_code, ''), -count(*)
    from deleted d
    where d.finished_at is not null
      and exists (select 1 from workspaces w where w.id = d.workspace_id)
    group by d.workspace_id, d.action_type, d.status, coalesce(d.error_code, '');
    return null;
end;
$$;

-- After a truncate there is nothing to count or queue.
create function tickwork_actions_truncated() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    delete from action_type_rows;
    delete from action_finished_rows;
    delete from action_finished_windows;
    delete from action_queue;
    delete from provider_messages;
    return null;
end;
$$;

-- A row that finishes other than by being published (cancelled, failed, expired, stuck,
-- suppressed) leaves the queue and is counted, here, per row: these are not the dispatch
-- hot path. A row published by the finalize does both in the finalize's own statement
-- (finalize_actions), set-based; nothing else publishes a row that is not finished.
create function tickwork_action_finished() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    delete from action_queue where id = new.id and workspace_id = new.workspace_id;
    insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
    values (new.workspace_id, new.action_type, new.status, coalesce(new.error_code, ''), 1);
    insert into action_finished_windows (workspace_id, action_type, status, error_code,
                                         bucket, n)
    values (new.workspace_id, new.action_type, new.status, coalesce(new.error_code, ''),
            tickwork_finish_bucket(new.finished_at), 1);
    return null;
end;
$$;

-- A finished row that changes: its old finished state uncounted, its new one counted (a
-- manual retry, failed -> queued, also re-enters the queue; the resolver, failed ->
-- published or queued).
create function tickwork_finished_action_changed() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
    values (old.workspace_id, old.action_type, old.status, coalesce(old.error_code, ''), -1);
    if new.finished_at is not null then
        insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
        values (new.workspace_id, new.action_type, new.status, coalesce(new.error_code, ''), 1);
        insert into action_finished_windows (workspace_id, action_type, status, error_code,
                                             bucket, n)
        values (new.workspace_id, new.action_type, new.status, coalesce(new.error_code, ''),
                tickwork_finish_bucket(now()), 1);
    else
        insert into action_queue (id, workspace_id, action_type, due_at, unsent, thing_id,
                                  target_key, recipient_id, tags)
        values (new.id, new.workspace_id, new.action_type,
                coalesce(new.next_attempt_at, new.publish_at),
                tickwork_behind_watermark(new.action_type,
                                          coalesce(new.next_attempt_at, new.publish_at),
                                          new.id),
                case when new.recurring_schedule_id is null then new.thing_id end,
                case when new.recurring_schedule_id is null and new.thing_id is not null
                     then new.target_key end,
                new.recipient_id, new.tags);
    end if;
    return null;
end;
$$;

-- An unfinished row whose due time (a backoff, a hold, a digest's window) or key changes:
-- its queue entry follows. A new due time needs a new message: the entry is handed to no
-- queue, and unsent when behind the watermark (whoever moved it sends it when it is due
-- soon; the tick's next pass otherwise).
create function tickwork_queued_action_moved() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    update action_queue
    set workspace_id = new.workspace_id, action_type = new.action_type,
        due_at = coalesce(new.next_attempt_at, new.publish_at), enqueued_at = null,
        unsent = tickwork_behind_watermark(new.action_type,
                                           coalesce(new.next_attempt_at, new.publish_at),
                                           new.id),
        thing_id = case when new.recurring_schedule_id is null then new.thing_id end,
        target_key = case when new.recurring_schedule_id is null and new.thing_id is not null
                          then new.target_key end,
        recipient_id = new.recipient_id, tags = new.tags
    where id = old.id and workspace_id = old.workspace_id;
    if (old.workspace_id, old.action_type) is distinct from (new.workspace_id, new.action_type)
    then
        insert into action_type_rows (workspace_id, action_type, n)
        values (old.workspace_id, old.action_type, -1), (new.workspace_id, new.action_type, 1);
    end if;
    return null;
end;
$$;

create trigger scheduled_actions_inserted
    after insert on scheduled_actions
    referencing new table as inserted
    for each statement execute function tickwork_actions_inserted();

create trigger scheduled_actions_deleted
    after delete on scheduled_actions
    referencing old table as deleted
    for each statement execute function tickwork_actions_deleted();

create trigger scheduled_actions_truncated
    after truncate on scheduled_actions
    for each statement execute function tickwork_actions_truncated();

-- The WHEN clauses are false for every claim, and for a finalize that publishes (the
-- queue's follows only the columns it names: the claim sets none of them).
create trigger scheduled_actions_finished
    after update on scheduled_actions
    for each row
    when (old.finished_at is null and new.finished_at is not null
          and new.status <> 'published')
    execute function tickwork_action_finished();

create trigger scheduled_actions_finished_changed
    after update on scheduled_actions
    for each row
    when (old.finished_at is not null
          and (old.status, old.finished_at, old.error_code, old.workspace_id, old.action_type)
              is distinct from
              (new.status, new.finished_at, new.error_code, new.workspace_id,
               new.action_type))
    execute function tickwork_finished_action_changed();

create trigger scheduled_actions_moved
    after update of next_attempt_at, publish_at, workspace_id, action_type, thing_id,
                    target_key, recurring_schedule_id, recipient_id, tags
    on scheduled_actions
    for each row
    when (old.finished_at is null and new.finished_at is null
          and ((coalesce(old.next_attempt_at, old.publish_at), old.workspace_id,
                old.action_type, old.thing_id, old.target_key, old.recurring_schedule_id,
                old.recipient_id, old.tags)
               is distinct from
               (coalesce(new.next_attempt_at, new.publish_at), new.workspace_id,
                new.action_type, new.thing_id, new.target_key, new.recurring_schedule_id,
                new.recipient_id, new.tags)))
    execute function tickwork_queued_action_moved();

-- The rows not finished today: queued, none behind a watermark (there is none yet).
insert into action_queue (id, workspace_id, action_type, due_at, enqueued_at, thing_id,
                          target_key, recipient_id, tags)
select id, workspace_id, action_type, coalesce(next_attempt_at, publish_at), enqueued_at,
       case when recurring_schedule_id is null then thing_id end,
       case when recurring_schedule_id is null and thing_id is not null then target_key end,
       recipient_id, tags
from scheduled_actions
where finished_at is null;

-- The API reads a workspace's backlog (its quota) through the queue, and hands the rows it
-- makes due soon to their queue (enqueue_soon).
grant select, update (enqueued_at, unsent) on action_queue to tickwork_api;
alter table action_queue enable row level security;
create policy action_queue_tenant on action_queue to tickwork_api
    using (workspace_id = tickwork_current_workspace());

-- After a restore or a load with triggers disabled (session_replication_role = replica,
-- pg_restore --disable-triggers), what the triggers keep is rebuilt from the rows:
-- `select tickwork_rebuild_derived()` (docs/operations.md). The queue then holds exactly
-- the unfinished rows (none behind a watermark: the tick's passes start over), and the
-- rollup's counts are counted afresh.
create function tickwork_rebuild_derived() returns void
language plpgsql as $$
begin
    delete from tick_watermarks;
    delete from tick_passes;
    delete from action_queue q
    where not exists (select 1 from scheduled_actions a
                      where a.id = q.id and a.workspace_id = q.workspace_id
                        and a.finished_at is null);
    update action_queue q
    set due_at = coalesce(a.next_attempt_at, a.publish_at), unsent = false,
        thing_id = case when a.recurring_schedule_id is null then a.thing_id end,
        target_key = case when a.recurring_schedule_id is null and a.thing_id is not null
                          then a.target_key end,
        recipient_id = a.recipient_id, tags = a.tags
    from scheduled_actions a
    where a.id = q.id and a.workspace_id = q.workspace_id;
    insert into action_queue (id, workspace_id, action_type, due_at, enqueued_at, thing_id,
                              target_key, recipient_id, tags)
    select id, workspace_id, action_type, coalesce(next_attempt_at, publish_at), null,
           case when recurring_schedule_id is null then thing_id end,
           case when recurring_schedule_id is null and thing_id is not null then target_key end,
           recipient_id, tags
    from scheduled_actions a
    where a.finished_at is null
      and not exists (select 1 from action_queue q
                      where q.id = a.id and q.workspace_id = a.workspace_id);
    delete from action_type_rows;
    insert into action_type_rows (workspace_id, action_type, n)
    select workspace_id, action_type, count(*) from scheduled_actions
    group by workspace_id, action_type;
    delete from action_finished_rows;
    insert into action_finished_rows (workspace_id, action_type, status, error_code, n)
    select workspace_id, action_type, status, coalesce(error_code, ''), count(*)
    from scheduled_actions where finished_at is not null
    group by workspace_id, action_type, status, coalesce(error_code, '');
    insert into provider_messages (connection_id, message_id, workspace_id, action_id)
    select connection_id, provider_id, workspace_id, id from scheduled_actions
    where status = 'published' and connection_id is not null and provider_id is not null
    on conflict do nothing;
end;
$$;
revoke execute on function tickwork_rebuild_derived() from public;

-- ---------------------------------------------------------------- the resolver's candidates

-- Ambiguous and stuck attempts the resolver has not settled: its work, oldest first. An
-- entry leaves the index when it is settled (delivered or requeued).
create index ix_action_attempts_unresolved on action_attempts (started_at, action_id)
    where outcome in ('ambiguous', 'stuck')
      and (resolution is null or resolution = 'unresolved');

-- ---------------------------------------------------------------- scheduled_actions' indexes

-- None of these names a column the claim or the finalize writes any more.
drop index ix_scheduled_actions_due;
drop index ix_scheduled_actions_active_workspace;
drop index ix_scheduled_actions_finished;
drop index ix_scheduled_actions_unresolved;
drop index ix_scheduled_actions_retention;
drop index ix_scheduled_actions_provider_message;

-- (a tag's and a recipient's rows not finished are the queue's: ix_action_queue_tags and
-- ix_action_queue_recipient)
drop index ix_scheduled_actions_pending_tags;
drop index ix_scheduled_actions_pending_recipient;

-- The primary key becomes (id, workspace_id), which lookups by id use as before and which the
-- composite foreign keys (migration 0037) reference instead of a (workspace_id, id) index of
-- their own: one index fewer on every insert, and no index left that a lookup of a
-- workspace's rows by workspace alone could take in place of the one it should (the
-- duplicate-publish guard once read a whole new workspace's rows per inserted row that way).
create unique index if not exists scheduled_actions_pkey_ws on scheduled_actions
    (id, workspace_id);

alter table scheduled_actions drop constraint scheduled_actions_rescheduled_from_fkey;
alter table rule_actions drop constraint rule_actions_action_id_fkey;
alter table recipient_cap_slots drop constraint recipient_cap_slots_action_id_fkey;
alter table enrollments drop constraint enrollments_current_action_id_fkey;
alter table enrollment_actions drop constraint enrollment_actions_action_id_fkey;
alter table action_changes drop constraint action_changes_action_id_fkey;
alter table digests drop constraint digests_action_id_fkey;

drop index ux_scheduled_actions_workspace_id;
alter table scheduled_actions
    drop constraint scheduled_actions_pkey,
    add constraint scheduled_actions_pkey primary key using index scheduled_actions_pkey_ws;

alter table scheduled_actions add constraint scheduled_actions_rescheduled_from_fkey
    foreign key (workspace_id, rescheduled_from) references scheduled_actions (workspace_id, id);
alter table rule_actions add constraint rule_actions_action_id_fkey
    foreign key (workspace_id, action_id) references scheduled_actions (workspace_id, id)
    on delete cascade;
alter table recipient_cap_slots add constraint recipient_cap_slots_action_id_fkey
    foreign key (workspace_id, action_id) references scheduled_actions (workspace_id, id)
    on delete cascade;
alter table enrollments add constraint enrollments_current_action_id_fkey
    foreign key (workspace_id, current_action_id) references scheduled_actions (workspace_id, id);
alter table enrollment_actions add constraint enrollment_actions_action_id_fkey
    foreign key (workspace_id, action_id) references scheduled_actions (workspace_id, id)
    on delete cascade;
alter table action_changes add constraint action_changes_action_id_fkey
    foreign key (workspace_id, action_id) references scheduled_actions (workspace_id, id)
    on delete cascade;
alter table digests add constraint digests_action_id_fkey
    foreign key (workspace_id, action_id) references scheduled_actions (workspace_id, id)
    on delete set null (action_id);

-- ---------------------------------------------------------------- no row trigger before an update

-- A BEFORE UPDATE row trigger makes Postgres lock each row it updates first (a tuple lock and
-- its WAL record, whatever the trigger's WHEN or columns say): one more write per claim and
-- per finalize. None is left: every statement of the engine stamps updated_at itself (a test
-- reads them all), and the checks that only refuse run after the update, in the same
-- statement (an error there undoes it all the same). An update made by hand sets
-- updated_at too (docs/operations.md): the removal of old history tells a row changed since
-- its archive by it.
drop trigger scheduled_actions_touch on scheduled_actions;

-- The tags' check moves there too: as a CHECK constraint it ran its SQL function (an
-- aggregate, which Postgres cannot inline) on every update of every row, the claim's and the
-- finalize's included.
create or replace function tickwork_check_action_columns() returns trigger
language plpgsql as $$
begin
    if new.action_type !~ '^[a-z][a-z0-9_]{0,62}$' then
        raise exception 'new row for relation "scheduled_actions" violates check constraint "%"',
            'scheduled_actions_action_type_check'
            using errcode = 'check_violation', constraint = 'scheduled_actions_action_type_check';
    end if;
    if new.source !~ '^[a-z_]{1,32}$' then
        raise exception 'new row for relation "scheduled_actions" violates check constraint "%"',
            'scheduled_actions_source_check'
            using errcode = 'check_violation', constraint = 'scheduled_actions_source_check';
    end if;
    if jsonb_typeof(new.payload) <> 'object' then
        raise exception 'new row for relation "scheduled_actions" violates check constraint "%"',
            'scheduled_actions_payload_object'
            using errcode = 'check_violation', constraint = 'scheduled_actions_payload_object';
    end if;
    if octet_length(new.payload::text) > 65536 then
        raise exception 'new row for relation "scheduled_actions" violates check constraint "%"',
            'scheduled_actions_payload_size'
            using errcode = 'check_violation', constraint = 'scheduled_actions_payload_size';
    end if;
    if cardinality(new.tags) > 0 and not tickwork_tags_valid(new.tags) then
        raise exception 'new row for relation "scheduled_actions" violates check constraint "%"',
            'scheduled_actions_tags_check'
            using errcode = 'check_violation', constraint = 'scheduled_actions_tags_check';
    end if;
    return new;
end;
$$;
alter table scheduled_actions drop constraint scheduled_actions_tags_check;

drop trigger scheduled_actions_check_columns on scheduled_actions;
create trigger scheduled_actions_check_columns
    before insert on scheduled_actions
    for each row execute function tickwork_check_action_columns();
create trigger scheduled_actions_check_changed_columns
    after update of action_type, source, payload, tags on scheduled_actions
    for each row execute function tickwork_check_action_columns();

-- The guard looks up a published sibling once per inserted row. Its plan is cached for the
-- session: planned on statistics older than a large insert (a new workspace, a table analyzed
-- nearly empty), it reads the whole table for each row, so one statement of 8,000 rows read
-- 32M tuples (5 s). Without sequential scans its lookup is ix_scheduled_actions_thing's at any
-- size and on any statistics: impossible by construction, not by the planner's guess.
alter function tickwork_publish_guard() set enable_seqscan = off;

drop trigger scheduled_actions_publish_guard_update on scheduled_actions;
create trigger scheduled_actions_publish_guard_update
    after update of status on scheduled_actions
    for each row
    when (new.status in ('queued', 'submitted')
          and old.status not in ('queued', 'submitted')
          and new.thing_id is not null
          and new.recurring_schedule_id is null)
    execute function tickwork_publish_guard();

-- The recurring failure policy's cancel stamps its rows (as 0003's did, through the touch
-- trigger).
create or replace function tickwork_recurring_outcome() returns trigger
language plpgsql as $$
declare
    failures   integer;
    threshold  integer;
    paused     uuid;
begin
    if new.status = 'published' then
        update recurring_schedules set consecutive_failures = 0
        where id = new.recurring_schedule_id and consecutive_failures <> 0;
        return null;
    end if;

    update recurring_schedules set consecutive_failures = consecutive_failures + 1
    where id = new.recurring_schedule_id
    returning consecutive_failures, max_failures_before_pause into failures, threshold;
    if failures is null or failures < threshold then
        return null;
    end if;

    update recurring_schedules
    set status = 'paused',
        paused_at = now(),
        paused_reason = format(
            'paused automatically after %s failed occurrences in a row; the last one'
            ' (%s) failed with %s: %s',
            failures, new.publish_at, coalesce(new.error_code, 'an error'),
            coalesce(left(new.last_error, 500), 'no message')),
        last_materialized_through = least(last_materialized_through, now())
    where id = new.recurring_schedule_id and status = 'active'
    returning id into paused;
    -- Rows not yet due are cancelled; due ones are left to the dispatcher and the tick's
    -- expiry, which may hold them now and wait for this schedule's row (a deadlock).
    if paused is not null then
        update scheduled_actions set status = 'cancelled', finished_at = now(),
                                     updated_at = now()
        where recurring_schedule_id = paused and source = 'recurring' and status = 'queued'
          and coalesce(next_attempt_at, publish_at) > now();
    end if;
    return null;
end;
$$;

-- Room on each page for the claim's and the finalize's new versions of its rows (they grow:
-- the claim's times, the provider's message id), so both stay HOT updates: at 80 a page
-- of finalized rows no longer fits them all, and a fifth of the finalizes moved a row to
-- another page (an entry in every index). New pages only: a table rewritten (VACUUM FULL,
-- pg_repack) takes it whole.
alter table scheduled_actions set (fillfactor = 70);
