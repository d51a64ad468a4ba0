-- Automation rules: an app's events and reference dates become ordinary scheduled_actions
-- rows (source 'rule', a dedupe key, the context they were rendered from). The engine does
-- not know about rules; these tables are the producers' own.

create table rules (
    id                uuid primary key default gen_random_uuid(),
    workspace_id      uuid not null references workspaces (id) on delete cascade,
    name              text not null check (length(name) between 1 and 200),
    enabled           boolean not null default true,
    -- 'event': fires when the app posts an event of event_type. 'time': fires at a named
    -- reference date of an entity type (a booking's 'start') plus offset_seconds (negative:
    -- before it).
    trigger_type      text not null check (trigger_type in ('event', 'time')),
    event_type        text check (event_type ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$'),
    entity_type       text check (entity_type ~ '^[a-z][a-z0-9_]{0,62}$'),
    reference         text check (reference ~ '^[a-z][a-z0-9_]{0,62}$'),
    offset_seconds    integer check (offset_seconds between -31622400 and 31622400),
    -- Every condition must hold on the context for the rule to fire (a JSON array).
    conditions        jsonb not null default '[]'::jsonb
                      check (jsonb_typeof(conditions) = 'array'),
    -- The action each firing makes: its type, target and payload are templates.
    action_type       text not null check (action_type ~ '^[a-z][a-z0-9_]{0,62}$'),
    target_key        text not null check (length(target_key) between 1 and 2000),
    payload_template  jsonb not null default '{}'::jsonb
                      constraint rules_payload_object check (jsonb_typeof(payload_template) = 'object')
                      constraint rules_payload_size check (octet_length(payload_template::text) <= 65536),
    revision          integer not null default 1 check (revision >= 1),
    -- The last firing that failed (a template that met a missing field), for the tenant.
    last_error        text,
    last_error_at     timestamptz,
    created_by        text,
    created_at        timestamptz not null default now(),
    updated_at        timestamptz not null default now(),
    -- Deleted rules stay, so the actions they made keep their rule.
    deleted_at        timestamptz,
    constraint rules_trigger_shape check (
        (trigger_type = 'event' and event_type is not null and entity_type is null
         and reference is null and offset_seconds is null)
        or (trigger_type = 'time' and event_type is null and entity_type is not null
            and reference is not null and offset_seconds is not null)
    )
);

create trigger rules_touch
    before update on rules
    for each row execute function tickwork_touch_updated_at();

-- The producers' ways in: enabled rules of an event type, of an entity type's reference.
create index ix_rules_event on rules (workspace_id, event_type)
    where trigger_type = 'event' and enabled and deleted_at is null;
create index ix_rules_time on rules (workspace_id, entity_type, reference)
    where trigger_type = 'time' and enabled and deleted_at is null;
-- The API's list.
create index ix_rules_workspace on rules (workspace_id, created_at, id) where deleted_at is null;

-- An app's entity (a booking, an episode) as far as time rules need it: its zone, its named
-- reference dates and the context its actions are rendered from.
create table entities (
    workspace_id  uuid not null references workspaces (id) on delete cascade,
    entity_type   text not null check (entity_type ~ '^[a-z][a-z0-9_]{0,62}$'),
    entity_id     text not null check (length(entity_id) between 1 and 200),
    timezone      text not null,
    context       jsonb not null default '{}'::jsonb
                  constraint entities_context_object check (jsonb_typeof(context) = 'object')
                  constraint entities_context_size check (octet_length(context::text) <= 65536),
    updated_by    text,
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now(),
    primary key (workspace_id, entity_type, entity_id)
);

create trigger entities_timezone_valid
    before insert or update of timezone on entities
    for each row execute function tickwork_check_timezone();
create trigger entities_touch
    before update on entities
    for each row execute function tickwork_touch_updated_at();

create table entity_dates (
    workspace_id  uuid not null,
    entity_type   text not null,
    entity_id     text not null,
    name          text not null check (name ~ '^[a-z][a-z0-9_]{0,62}$'),
    at            timestamptz not null,
    -- The wall time as the app gave it (in the entity's zone), when it gave one.
    wall          timestamp without time zone,
    primary key (workspace_id, entity_type, entity_id, name),
    foreign key (workspace_id, entity_type, entity_id)
        references entities (workspace_id, entity_type, entity_id) on delete cascade
);

-- A time rule created, enabled or moved finds the entities with its reference date.
create index ix_entity_dates_reference on entity_dates (workspace_id, entity_type, name, at);

-- Which rule made which action, for which entity and reference, from which context. The
-- action row itself is an ordinary scheduled_actions row; this is the producers' ledger.
create table rule_actions (
    action_id        uuid primary key references scheduled_actions (id) on delete cascade,
    workspace_id     uuid not null references workspaces (id) on delete cascade,
    rule_id          uuid not null references rules (id),
    kind             text not null check (kind in ('event', 'time')),
    -- The idempotency key without the generation suffix the action's dedupe_key may carry.
    idempotency_key  text not null check (length(idempotency_key) between 1 and 200),
    entity_type      text,
    entity_id        text,
    reference        text,
    reference_at     timestamptz,
    -- The context snapshot the payload was rendered from: dispatch needs no query.
    context          jsonb not null,
    created_at       timestamptz not null default now(),
    constraint rule_actions_time_entity check (
        kind = 'event' or (entity_type is not null and entity_id is not null
                           and reference is not null and reference_at is not null)
    )
);

create index ix_rule_actions_key on rule_actions (workspace_id, idempotency_key);
create index ix_rule_actions_rule on rule_actions (rule_id, created_at);
create index ix_rule_actions_entity on rule_actions (workspace_id, entity_type, entity_id)
    where entity_type is not null;

-- Row-level security, as for every tenant table: the API's role sees its workspace only.
grant select, insert, update on rules to tickwork_api;
alter table rules enable row level security;
create policy rules_tenant on rules to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select, insert, update, delete on entities to tickwork_api;
alter table entities enable row level security;
create policy entities_tenant on entities to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select, insert, update, delete on entity_dates to tickwork_api;
alter table entity_dates enable row level security;
create policy entity_dates_tenant on entity_dates to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select, insert on rule_actions to tickwork_api;
alter table rule_actions enable row level security;
create policy rule_actions_tenant on rule_actions to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());
