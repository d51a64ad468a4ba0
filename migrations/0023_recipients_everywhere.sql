-- Recipients everywhere: recurring schedules and schedule intents may name a recipient
-- (and be transactional), like one-off actions; the rows they make carry it, so quiet hours
-- and caps apply to every producer. A recurring schedule's payload may be rendered per
-- occurrence (seed 000 §10: "per-instance overrides applied at expansion").

-- ----------------------------------------------------------------- recurring schedules

alter table recurring_schedules
    add column recipient_id text check (length(recipient_id) between 1 and 200),
    add column transactional boolean not null default false,
    -- Where `timezone` came from when the schedule was made or its zone last set: given in
    -- the request, the recipient's, or the workspace's. Null: made before this was kept.
    add column timezone_from text check (timezone_from in ('given', 'recipient', 'workspace')),
    -- The payload's strings are templates rendered at expansion with the occurrence.
    add column render_payload boolean not null default false,
    -- Occurrences of the rule (from dtstart) up to last_materialized_through: the next
    -- occurrence's index is this plus one.
    add column occurrence_count bigint not null default 0 check (occurrence_count >= 0);

-- An occurrence is the instant the rule gave, whether or not quiet hours moved its row:
-- two occurrences moved to the end of the same quiet window are two rows, and a repeated
-- expansion still creates nothing twice. (The claim writes neither column: still HOT.)
drop index ux_scheduled_actions_recurring_occurrence;
create unique index ux_scheduled_actions_recurring_occurrence on scheduled_actions
    (recurring_schedule_id, (coalesce(original_publish_at, publish_at)))
    where recurring_schedule_id is not null and source = 'recurring' and not cancelled;

-- ------------------------------------------------------------------------------ intents

alter table schedule_intents
    add column recipient_id text check (length(recipient_id) between 1 and 200),
    add column transactional boolean not null default false;

create or replace function tickwork_intent_revision() returns trigger
language plpgsql as $$
begin
    if (new.action_type, new.targets, new.wall_date, new.wall_time, new.timezone,
        new.publish_at, new.payload, new.state, new.recipient_id, new.transactional)
       is distinct from
       (old.action_type, old.targets, old.wall_date, old.wall_time, old.timezone,
        old.publish_at, old.payload, old.state, old.recipient_id, old.transactional) then
        new.version := old.version + 1;
    else
        new.version := old.version;
    end if;
    return new;
end;
$$;

-- A wall time with no zone of its own is read in the recipient's zone when the intent has
-- a recipient, else the workspace's: each zone change moves only the intents it governs.
create or replace function tickwork_intents_follow_workspace_zone() returns trigger
language plpgsql security definer set search_path = pg_catalog, public as $$
begin
    update schedule_intents
    set recheck_at = now()
    where workspace_id = new.id
      and timezone is null
      and recipient_id is null
      and wall_date is not null
      and state = 'scheduled';
    return null;
end;
$$;

create function tickwork_intents_follow_recipient_zone() returns trigger
language plpgsql security definer set search_path = pg_catalog, public as $$
begin
    update schedule_intents
    set recheck_at = now()
    where workspace_id = new.workspace_id
      and recipient_id = new.recipient_id
      and timezone is null
      and wall_date is not null
      and state = 'scheduled';
    return null;
end;
$$;

create trigger recipients_timezone_moves_intents
    after update of timezone on recipients
    for each row when (new.timezone is distinct from old.timezone)
    execute function tickwork_intents_follow_recipient_zone();
