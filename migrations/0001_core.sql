-- Tickwork core schema: workspaces, members and the scheduled_actions queue.
-- Every instant is timestamptz (UTC on the wire); wall times are resolved before they get here.

create function tickwork_touch_updated_at() returns trigger
language plpgsql as $$
begin
    new.updated_at := now();
    return new;
end;
$$;

-- Rejects a time zone Postgres does not know, so a garbage zone never reaches a row.
create function tickwork_check_timezone() returns trigger
language plpgsql as $$
begin
    perform now() at time zone new.timezone;
    return new;
exception when invalid_parameter_value then
    raise exception 'unknown time zone "%"', new.timezone
        using errcode = '22023', hint = 'use an IANA zone name such as Europe/Berlin';
end;
$$;

create table workspaces (
    id          uuid primary key default gen_random_uuid(),
    name        text not null check (length(name) between 1 and 200),
    timezone    text not null default 'UTC',
    settings    jsonb not null default '{}'::jsonb check (jsonb_typeof(settings) = 'object'),
    created_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now()
);

create trigger workspaces_timezone_valid
    before insert or update of timezone on workspaces
    for each row execute function tickwork_check_timezone();
create trigger workspaces_touch
    before update on workspaces
    for each row execute function tickwork_touch_updated_at();

create table workspace_members (
    workspace_id uuid not null references workspaces (id) on delete cascade,
    user_id      text not null check (length(user_id) between 1 and 200),
    role         text not null default 'member' check (role in ('member', 'admin')),
    created_at   timestamptz not null default now(),
    primary key (workspace_id, user_id)
);
create index ix_workspace_members_user on workspace_members (user_id);

create table scheduled_actions (
    id                     uuid primary key default gen_random_uuid(),
    workspace_id           uuid not null references workspaces (id) on delete cascade,
    created_by             text,
    action_type            text not null check (action_type ~ '^[a-z][a-z0-9_]{0,62}$'),
    -- The thing being acted on (a post, a booking) and the sub-target (platform, channel,
    -- phone). At most one active row per (workspace, action_type, thing_id, target_key).
    thing_id               text check (length(thing_id) between 1 and 200),
    target_key             text not null check (length(target_key) between 1 and 200),
    payload                jsonb not null default '{}'::jsonb
                           constraint scheduled_actions_payload_object
                               check (jsonb_typeof(payload) = 'object')
                           constraint scheduled_actions_payload_size
                               check (octet_length(payload::text) <= 65536),
    publish_at             timestamptz not null,
    status                 text not null default 'queued'
                           check (status in ('queued', 'submitted', 'published', 'failed', 'cancelled')),
    error_code             text,
    last_error             text,
    -- Provider attempts made (incremented by each claim); manual_retries counts admin retries.
    attempt_count          integer not null default 0 check (attempt_count >= 0),
    manual_retries         integer not null default 0 check (manual_retries >= 0),
    next_attempt_at        timestamptz,
    -- When the tick last handed the row to its queue; null means "not in any queue".
    enqueued_at            timestamptz,
    provider_id            text,
    submitted_at           timestamptz,
    finished_at            timestamptz,
    dedupe_key             text check (length(dedupe_key) between 1 and 200),
    rescheduled_from       uuid references scheduled_actions (id),
    -- Who minted the row: 'api', 'send_now', 'recurring', 'intent', 'rule', 'drip'.
    source                 text not null default 'api' check (source ~ '^[a-z_]{1,32}$'),
    recurring_schedule_id  uuid,
    created_at             timestamptz not null default now(),
    updated_at             timestamptz not null default now(),
    -- A terminal row says when it ended; an active one has not ended.
    constraint scheduled_actions_finished_when_terminal check (
        (status in ('published', 'failed', 'cancelled')) = (finished_at is not null)
    )
);

-- Calendar queries: a workspace's actions in a date range, in (publish_at, id) order.
create index ix_scheduled_actions_calendar on scheduled_actions (workspace_id, publish_at, id);

-- The tick's hot path: queued rows not in any queue, by the time they are due.
-- Rows leave this index when enqueued, so a burst being drained is never rescanned.
create index ix_scheduled_actions_due on scheduled_actions
    ((coalesce(next_attempt_at, publish_at)), id)
    where status = 'queued' and enqueued_at is null;

-- The planner's row estimates for the due time, which it cannot take from the partial index.
create statistics scheduled_actions_due_at on (coalesce(next_attempt_at, publish_at))
    from scheduled_actions;

-- Queued rows already handed to a queue: found again when their message was lost.
create index ix_scheduled_actions_enqueued on scheduled_actions (enqueued_at)
    where status = 'queued' and enqueued_at is not null;

-- Zombie recovery: rows claimed by a dispatcher that never finished. The predicate says
-- "submitted" without naming status (only a submitted row has submitted_at and no
-- finished_at), so the planner never picks this small index for the batch claim and
-- finalize, where its stale row estimate turned a join into a scan of every submitted row.
create index ix_scheduled_actions_in_flight on scheduled_actions (submitted_at)
    where submitted_at is not null and finished_at is null;

-- At most one active row per (thing, target). Playbook §2, scoped to the workspace.
create unique index ux_scheduled_actions_active_thing_target on scheduled_actions
    (workspace_id, action_type, thing_id, target_key)
    where status in ('queued', 'submitted') and thing_id is not null;

-- Every row of a thing, any status: the publish guard and the reconciler read it.
create index ix_scheduled_actions_thing on scheduled_actions (workspace_id, thing_id, target_key)
    where thing_id is not null;

-- Idempotent creation: one row per caller-supplied key in a workspace.
create unique index ux_scheduled_actions_dedupe on scheduled_actions (workspace_id, dedupe_key)
    where dedupe_key is not null;

create trigger scheduled_actions_touch
    before update on scheduled_actions
    for each row execute function tickwork_touch_updated_at();

-- Playbook §7: no active row for a (thing, target) that already has a published sibling.
-- A trigger, not a unique index, because existing duplicate-published history is legitimate.
create function tickwork_publish_guard() returns trigger
language plpgsql as $$
begin
    if exists (
        select 1 from scheduled_actions
        where workspace_id = new.workspace_id
          and thing_id = new.thing_id
          and target_key = new.target_key
          and action_type = new.action_type
          and status = 'published'
          and id <> new.id
    ) then
        raise exception 'duplicate-publish guard: % for thing % target % already published',
            new.action_type, new.thing_id, new.target_key
            using errcode = '23505', constraint = 'scheduled_actions_publish_guard';
    end if;
    return new;
end;
$$;

create trigger scheduled_actions_publish_guard_insert
    before insert on scheduled_actions
    for each row
    when (new.status in ('queued', 'submitted') and new.thing_id is not null)
    execute function tickwork_publish_guard();

-- Only a row becoming active is checked (retry of a failed row); the claim
-- queued -> submitted is not, so the hot path pays nothing.
create trigger scheduled_actions_publish_guard_update
    before update of status on scheduled_actions
    for each row
    when (new.status in ('queued', 'submitted')
          and old.status not in ('queued', 'submitted')
          and new.thing_id is not null)
    execute function tickwork_publish_guard();
