-- Schedule intents: what an app declares it wants for one of its things (a post, a booking),
-- per workspace. The reconciler keeps scheduled_actions in step with them (playbook §5).
-- Row-level security is added for every tenant table in one later migration, not here.

create table schedule_intents (
    workspace_id        uuid not null references workspaces (id) on delete cascade,
    -- The app's own id for the thing; scoped to the workspace, like scheduled_actions.thing_id.
    thing_id            text not null check (length(thing_id) between 1 and 200),
    action_type         text not null check (action_type ~ '^[a-z][a-z0-9_]{0,62}$'),
    -- The set of targets (platforms, channels), sorted and without duplicates.
    targets             text[] not null
                        constraint schedule_intents_targets_count
                            check (cardinality(targets) between 1 and 100)
                        constraint schedule_intents_targets_not_null
                            check (array_position(targets, null) is null),
    -- When: a wall date and time in `timezone` (null: the workspace's timezone, followed when
    -- it changes), or a UTC instant. Exactly one of the two.
    wall_date           date,
    wall_time           time,
    timezone            text,
    publish_at          timestamptz,
    payload             jsonb not null default '{}'::jsonb
                        constraint schedule_intents_payload_object
                            check (jsonb_typeof(payload) = 'object')
                        constraint schedule_intents_payload_size
                            check (octet_length(payload::text) <= 65536),
    state               text not null default 'scheduled'
                        check (state in ('scheduled', 'unscheduled')),
    -- Bumped by a trigger whenever what the intent asks for changes.
    version             bigint not null default 1 check (version >= 1),
    -- Reconciler bookkeeping: the version last reconciled, when, and when to look again
    -- although nothing changed (the age gate deferred a cancel, the workspace's zone moved,
    -- or the periodic sweep of intents with live rows). Null: nothing left to do.
    reconciled_version  bigint not null default 0,
    reconciled_at       timestamptz,
    recheck_at          timestamptz,
    updated_by          text,
    created_at          timestamptz not null default now(),
    updated_at          timestamptz not null default now(),
    primary key (workspace_id, thing_id),
    constraint schedule_intents_one_kind_of_time check (
        (publish_at is null and wall_date is not null and wall_time is not null)
        or (publish_at is not null and wall_date is null and wall_time is null
            and timezone is null)
    )
);

-- The reconciler's two cheap ways in: intents changed since they were last reconciled...
create index ix_schedule_intents_changed on schedule_intents (updated_at)
    where version > reconciled_version;
-- ...and intents to look at again at a given time.
create index ix_schedule_intents_recheck on schedule_intents (recheck_at)
    where recheck_at is not null;

create trigger schedule_intents_timezone_valid
    before insert or update of timezone on schedule_intents
    for each row execute function tickwork_check_timezone();

-- A new version whenever what the intent asks for changes; the reconciler's bookkeeping
-- (and a no-op write of the same values) leaves version and updated_at alone.
create function tickwork_intent_revision() returns trigger
language plpgsql as $$
begin
    if (new.action_type, new.targets, new.wall_date, new.wall_time, new.timezone,
        new.publish_at, new.payload, new.state)
       is distinct from
       (old.action_type, old.targets, old.wall_date, old.wall_time, old.timezone,
        old.publish_at, old.payload, old.state) then
        new.version := old.version + 1;
    else
        new.version := old.version;
    end if;
    return new;
end;
$$;

-- Fires before schedule_intents_touch (triggers run in name order), which sees the new version.
create trigger schedule_intents_revision
    before update on schedule_intents
    for each row execute function tickwork_intent_revision();
create trigger schedule_intents_touch
    before update on schedule_intents
    for each row when (new.version <> old.version)
    execute function tickwork_touch_updated_at();

-- Intents whose wall time is in the workspace's zone resolve to new instants when that zone
-- changes: the reconciler looks at them again at once and moves their rows (cancel + insert).
-- It runs as the table owner: whoever may change a workspace's zone (the API's role) must
-- not need rights on schedule_intents for this bookkeeping of that workspace's own intents.
create function tickwork_intents_follow_workspace_zone() returns trigger
language plpgsql security definer set search_path = pg_catalog, public as $$
begin
    update schedule_intents
    set recheck_at = now()
    where workspace_id = new.id
      and timezone is null
      and wall_date is not null
      and state = 'scheduled';
    return null;
end;
$$;

create trigger workspaces_timezone_moves_intents
    after update of timezone on workspaces
    for each row when (new.timezone is distinct from old.timezone)
    execute function tickwork_intents_follow_workspace_zone();
