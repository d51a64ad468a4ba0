-- A burst's cost is the writes each action's row takes: the tick's mark, the claim, the
-- finalize. Postgres writes an update without touching any index (a HOT update) only when
-- no column an index names, in its key or its predicate, changes. The claim changes
-- status, submitted_at and attempt_count; so no index names them any more, and the claim
-- (queued -> submitted) is a HOT update. An active row is one not finished
-- (scheduled_actions_finished_when_terminal: finished_at is null exactly while queued or
-- submitted), so the indexes say `finished_at is null` where they said the status.

-- Room on each page for the claim's new row version beside the old one.
alter table scheduled_actions set (fillfactor = 80);

-- The recurring occurrence index told cancelled rows by their status; a stored column the
-- claim leaves unchanged tells them now.
alter table scheduled_actions add column cancelled boolean
    generated always as (status = 'cancelled') stored;

drop index ux_scheduled_actions_recurring_occurrence;
create unique index ux_scheduled_actions_recurring_occurrence on scheduled_actions
    (recurring_schedule_id, publish_at)
    where recurring_schedule_id is not null and source = 'recurring' and not cancelled;

-- The tick's hot path: rows in no queue and not finished, by due time. A claimed row always
-- has enqueued_at (the claim sets it if a message arrived for an unmarked row), so only
-- queued rows are in it.
drop index ix_scheduled_actions_due;
create index ix_scheduled_actions_due on scheduled_actions
    ((coalesce(next_attempt_at, publish_at)), id)
    where enqueued_at is null and finished_at is null;

-- Rows handed to a queue and not finished: queued ones whose message may be lost, and
-- submitted ones whose claimer may have died (enqueued_at <= submitted_at: zombie recovery
-- looks here instead of an index on submitted_at, which the claim writes).
-- Rows claimed unmarked before this migration get the stamp the claim now gives them.
update scheduled_actions set enqueued_at = submitted_at
where status = 'submitted' and enqueued_at is null;
drop index ix_scheduled_actions_enqueued;
drop index ix_scheduled_actions_in_flight;
create index ix_scheduled_actions_enqueued on scheduled_actions (enqueued_at)
    where enqueued_at is not null and finished_at is null;

drop index ux_scheduled_actions_active_thing_target;
create unique index ux_scheduled_actions_active_thing_target on scheduled_actions
    (workspace_id, action_type, thing_id, target_key)
    where finished_at is null and thing_id is not null and recurring_schedule_id is null;

-- A workspace's active rows, by due time: the quota counts them by the first column; and a
-- workspace's due backlog (/v1/stats) is a range of it, so whichever of this and the due
-- index the planner picks (its estimate of "due before now" counts finished history), the
-- read stays the rows due, never every active row of the workspace.
drop index ix_scheduled_actions_active_workspace;
create index ix_scheduled_actions_active_workspace on scheduled_actions
    (workspace_id, (coalesce(next_attempt_at, publish_at)))
    where finished_at is null;

-- Checks of columns no transition writes (the type, the source, the payload), made on the
-- writes that set them instead of on every update: the regular expressions and the
-- payload's text were an eighth of the database's work per action. Same constraint names
-- and error code, so callers see the same error.
create function tickwork_check_action_columns() returns trigger
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
    return new;
end;
$$;

alter table scheduled_actions
    drop constraint scheduled_actions_action_type_check,
    drop constraint scheduled_actions_source_check,
    drop constraint scheduled_actions_payload_object,
    drop constraint scheduled_actions_payload_size;

create trigger scheduled_actions_check_columns
    before insert or update of action_type, source, payload on scheduled_actions
    for each row execute function tickwork_check_action_columns();
