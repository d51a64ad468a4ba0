-- Recurring schedules: an RRULE in the schedule's own zone, materialized into
-- scheduled_actions over a sliding window by the expander (and on create, edit, resume).

create table recurring_schedules (
    id                         uuid primary key default gen_random_uuid(),
    workspace_id               uuid not null references workspaces (id) on delete cascade,
    created_by                 text,
    -- What every occurrence does: copied into each scheduled_actions row it makes.
    action_type                text not null check (action_type ~ '^[a-z][a-z0-9_]{0,62}$'),
    target_key                 text not null check (length(target_key) between 1 and 200),
    thing_id                   text check (length(thing_id) between 1 and 200),
    payload_template           jsonb not null default '{}'::jsonb
                               constraint recurring_schedules_payload_object
                                   check (jsonb_typeof(payload_template) = 'object')
                               constraint recurring_schedules_payload_size
                                   check (octet_length(payload_template::text) <= 65536),
    -- When: one RFC 5545 RRULE line, optionally EXDATE/RDATE lines, expanded from dtstart,
    -- a local wall time in `timezone`, so 09:00 stays 09:00 across DST. `until` is an
    -- instant after which nothing fires, whatever the rule says.
    rrule                      text not null check (length(rrule) between 1 and 8000),
    dtstart                    timestamp without time zone not null,
    timezone                   text not null,
    until                      timestamptz,
    status                     text not null default 'active'
                               check (status in ('active', 'paused', 'ended')),
    paused_reason              text,
    paused_at                  timestamptz,
    ended_reason               text,
    ended_at                   timestamptz,
    -- Bumped by every edit, so a client can tell which definition it saw.
    revision                   integer not null default 1 check (revision >= 1),
    -- Occurrences up to this instant have been materialized (or skipped); the next
    -- expansion starts after it.
    last_materialized_through  timestamptz not null,
    -- A wall time the rule produced that is at or before the next expansion's start: the
    -- expander iterates from it instead of from dtstart (rules without COUNT only).
    expansion_anchor           timestamp without time zone,
    -- Failure policy: failed occurrences in a row; at the threshold the schedule pauses.
    consecutive_failures       integer not null default 0 check (consecutive_failures >= 0),
    max_failures_before_pause  integer not null default 5
                               check (max_failures_before_pause between 1 and 1000),
    -- Catch-up policy: a missed occurrence younger than this still fires (at most one);
    -- older ones are skipped and counted. Never more than a day (seed 002's 24-hour rule).
    catch_up_window_seconds    integer not null default 3600
                               check (catch_up_window_seconds between 0 and 86400),
    skipped_occurrences        bigint not null default 0 check (skipped_occurrences >= 0),
    created_at                 timestamptz not null default now(),
    updated_at                 timestamptz not null default now(),
    -- A paused schedule says why and since when; an ended one says why and when.
    constraint recurring_schedules_paused_reason check (
        (status = 'paused') = (paused_reason is not null and paused_at is not null)
    ),
    constraint recurring_schedules_ended_reason check (
        (status = 'ended') = (ended_reason is not null and ended_at is not null)
    )
);

create trigger recurring_schedules_timezone_valid
    before insert or update of timezone on recurring_schedules
    for each row execute function tickwork_check_timezone();
create trigger recurring_schedules_touch
    before update on recurring_schedules
    for each row execute function tickwork_touch_updated_at();

-- The API's list: a workspace's schedules in (created_at, id) order.
create index ix_recurring_schedules_workspace on recurring_schedules (workspace_id, created_at, id);

-- The expander's work list: active schedules, least recently expanded first.
create index ix_recurring_schedules_expand on recurring_schedules (last_materialized_through, id)
    where status = 'active';

alter table scheduled_actions
    add constraint scheduled_actions_recurring_schedule_fk
    foreign key (recurring_schedule_id) references recurring_schedules (id);

-- Expansion is idempotent: one live row per (schedule, instant). Run-now rows are one-offs
-- beside the rule, and rows the schedule itself cancelled (pause, edit) must not block
-- materializing the same instant again after a resume or an edit.
create unique index ux_scheduled_actions_recurring_occurrence on scheduled_actions
    (recurring_schedule_id, publish_at)
    where recurring_schedule_id is not null and source = 'recurring' and status <> 'cancelled';

-- Every occurrence of a schedule shares its thing_id and target_key, so the one-active-row
-- rule and the publish guard of one-off actions do not apply to rows a schedule made;
-- their uniqueness is the index above.
drop index ux_scheduled_actions_active_thing_target;
create unique index ux_scheduled_actions_active_thing_target on scheduled_actions
    (workspace_id, action_type, thing_id, target_key)
    where status in ('queued', 'submitted') and thing_id is not null
      and recurring_schedule_id is null;

create or replace function tickwork_publish_guard() returns trigger
language plpgsql as $$
begin
    if exists (
        select 1 from scheduled_actions
        where workspace_id = new.workspace_id
          and thing_id = new.thing_id
          and target_key = new.target_key
          and action_type = new.action_type
          and status = 'published'
          and recurring_schedule_id is null
          and id <> new.id
    ) then
        raise exception 'duplicate-publish guard: % for thing % target % already published',
            new.action_type, new.thing_id, new.target_key
            using errcode = '23505', constraint = 'scheduled_actions_publish_guard';
    end if;
    return new;
end;
$$;

drop trigger scheduled_actions_publish_guard_insert on scheduled_actions;
create trigger scheduled_actions_publish_guard_insert
    before insert on scheduled_actions
    for each row
    when (new.status in ('queued', 'submitted') and new.thing_id is not null
          and new.recurring_schedule_id is null)
    execute function tickwork_publish_guard();

drop trigger scheduled_actions_publish_guard_update on scheduled_actions;
create trigger scheduled_actions_publish_guard_update
    before update of status on scheduled_actions
    for each row
    when (new.status in ('queued', 'submitted')
          and old.status not in ('queued', 'submitted')
          and new.thing_id is not null
          and new.recurring_schedule_id is null)
    execute function tickwork_publish_guard();

-- Failure policy, enforced where no code path can skip it: a materialized occurrence that
-- fails counts against its schedule, one that publishes resets the count, and at the
-- threshold an active schedule pauses with a reason and its queued occurrences not yet
-- due are cancelled. Each change names the state it expects. The WHEN clause keeps the
-- dispatcher's hot path free for every row no schedule made.
create function tickwork_recurring_outcome() returns trigger
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
        update scheduled_actions set status = 'cancelled', finished_at = now()
        where recurring_schedule_id = paused and source = 'recurring' and status = 'queued'
          and coalesce(next_attempt_at, publish_at) > now();
    end if;
    return null;
end;
$$;

create trigger scheduled_actions_recurring_outcome
    after update of status on scheduled_actions
    for each row
    when (new.recurring_schedule_id is not null
          and new.source = 'recurring'
          and new.status in ('published', 'failed')
          and old.status is distinct from new.status)
    execute function tickwork_recurring_outcome();
