-- Outcome events to the tenant: a workspace's endpoints, and the events they receive as
-- scheduled actions of the internal type `event` (source 'event'), so the engine's own
-- retries, dead-letter handling and delivery ledger carry them.
--
-- An endpoint's URL and signing secret live in a connection of provider `event` (the secret
-- in the secret store, like every connection's credentials); an event row names that
-- connection, so the dispatcher resolves it as it resolves any connection, once per wave.
create table event_endpoints (
    id             uuid primary key default gen_random_uuid(),
    workspace_id   uuid not null references workspaces (id) on delete cascade,
    connection_id  uuid not null references connections (id),
    -- Which events it receives; at least one.
    event_types    text[] not null
                   check (cardinality(event_types) between 1 and 6
                          and event_types <@ array['action.published', 'action.failed',
                                                   'action.delivered', 'action.bounced',
                                                   'action.cancelled',
                                                   'enrollment.completed']::text[]),
    -- Only events of actions of these types (null: every type).
    action_types   text[] check (action_types is null or cardinality(action_types) between 1 and 50),
    description    text check (length(description) <= 300),
    status         text not null default 'active'
                   check (status in ('active', 'disabled', 'deleted')),
    created_by     text,
    created_at     timestamptz not null default now(),
    updated_at     timestamptz not null default now(),
    deleted_at     timestamptz
);

-- The emitters read a workspace's active endpoints; a workspace has a handful at most.
create index ix_event_endpoints_workspace on event_endpoints (workspace_id)
    where status = 'active';

grant select, insert, update on event_endpoints to tickwork_api;
alter table event_endpoints enable row level security;
create policy event_endpoints_tenant on event_endpoints to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

-- Per-action ordering (engine.admission): the events of one action to one endpoint, oldest
-- first. Its columns and predicate are none that a claim or finalize writes, so those stay
-- HOT updates (migrations 0014, 0017).
create index ix_scheduled_actions_event_subject on scheduled_actions
    (connection_id, ((payload -> 'data' ->> 'id')), created_at, id)
    where source = 'event';

-- The outbox: outcomes that endpoints asked for, written by the statement that made the
-- outcome, turned into event rows by the tick (events.sql: pump_events) a batch at a time.
-- Narrow and with no index but its key, so the dispatcher's finalize pays one cheap insert
-- per wave for a workspace with endpoints, and nothing for one without.
create table event_outbox (
    id             bigint generated always as identity primary key,
    workspace_id   uuid not null,
    subject_id     uuid not null,
    event_type     text not null,
    action_type    text,
    -- The event's data, or (from the finalize) null and the action's fields that change,
    -- as they were: the pump reads the others (which never change) from the action's row,
    -- so the finalize builds no JSON.
    data           jsonb,
    status         text,
    error_code     text,
    attempt_count  integer,
    provider_id    text,
    finished_at    timestamptz,
    created_at     timestamptz not null default now()
);

grant insert on event_outbox to tickwork_api;

-- Outcomes of `subject_ids` (actions or enrollments), each with its event type, action type
-- (null for an enrollment) and public data, into the outbox when an active endpoint of
-- the workspace (data.workspace_id) asks for that event.
create function tickwork_emit_events(
    subject_ids uuid[], event_types text[], action_types text[], data jsonb[]
) returns integer
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    emitted integer;
begin
    insert into event_outbox (workspace_id, subject_id, event_type, action_type, data)
    select (s.data ->> 'workspace_id')::uuid, s.subject_id, s.event_type, s.action_type, s.data
    from unnest(subject_ids, event_types, action_types, data)
        as s(subject_id, event_type, action_type, data)
    where exists (
        select 1 from event_endpoints p
        where p.workspace_id = (s.data ->> 'workspace_id')::uuid and p.status = 'active'
          and s.event_type = any(p.event_types));
    get diagnostics emitted = row_count;
    return emitted;
end;
$$;

-- An action's public fields, as events carry them.
create function tickwork_action_event_data(a scheduled_actions) returns jsonb
language sql stable as $$
    select jsonb_build_object(
        'id', a.id, 'workspace_id', a.workspace_id, 'action_type', a.action_type,
        'thing_id', a.thing_id, 'target_key', a.target_key, 'status', a.status,
        'publish_at', a.publish_at, 'finished_at', a.finished_at, 'error_code', a.error_code,
        'attempt_count', a.attempt_count, 'provider_id', a.provider_id, 'source', a.source,
        'recipient_id', a.recipient_id, 'connection_id', a.connection_id)
$$;

-- An action reaching published, failed or cancelled by anything but the dispatcher's
-- finalize (a cancel, a bulk cancel, a producer's cancel, the tick failing a stuck or late
-- row, the resolver): its outcome goes to the outbox in the same statement, in its
-- transaction. Per row, only for those transitions (the WHEN clause is false for every
-- claim and every finalize); a workspace without endpoints costs one probe of an index of
-- active endpoints. The finalize (submitted -> published | failed) writes its wave's
-- outcomes itself, set-based (actions.sql: finalize_actions); the tick's `stuck` is the one
-- other move out of submitted. Event rows make no events.
create function tickwork_action_outcome_events() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    if exists (select 1 from event_endpoints
               where workspace_id = new.workspace_id and status = 'active') then
        perform tickwork_emit_events(
            array[new.id], array['action.' || new.status], array[new.action_type],
            array[tickwork_action_event_data(new)]);
    end if;
    return null;
end;
$$;

create trigger scheduled_actions_outcome_events
    after update of status on scheduled_actions
    for each row
    when (new.status in ('published', 'failed', 'cancelled')
          and old.status is distinct from new.status and new.source <> 'event'
          and (old.status <> 'submitted' or new.error_code = 'stuck'))
    execute function tickwork_action_outcome_events();

-- An enrollment completing (its last step done), in the statement that completes it.
create function tickwork_enrollment_completed_events() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    if exists (select 1 from event_endpoints
               where workspace_id = new.workspace_id and status = 'active') then
        perform tickwork_emit_events(
            array[new.id], array['enrollment.completed'], array[null::text],
            array[jsonb_build_object(
                'id', new.id, 'workspace_id', new.workspace_id,
                'campaign_id', new.campaign_id, 'recipient_id', new.recipient_id,
                'status', new.status, 'current_step', new.current_step,
                'completed_at', new.completed_at)]);
    end if;
    return null;
end;
$$;

create trigger enrollments_completed_events
    after update of status on enrollments
    for each row
    when (new.status = 'completed' and old.status is distinct from new.status)
    execute function tickwork_enrollment_completed_events();

