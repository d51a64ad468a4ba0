-- Digests and debounce: events for the same (rule, recipient, target, key) inside a window
-- become one action whose template sees all of them.
--
-- A digest is open while its action is still queued: each item is appended under the open
-- digest's row lock and re-renders the action's payload by a conditional update that only
-- succeeds while the action is `queued`. Once a dispatcher claimed it, the next item opens
-- the next digest. The items of one group are unique by their key across all its digests,
-- so a duplicate delivery adds nothing, even after the digest it went into was sent.

-- The rule's `digest` (tickwork.digests.model.DigestSpec as JSON): its key template and
-- window. Null: every event makes its own action.
alter table rules
    add column digest jsonb
        constraint rules_digest_object check (digest is null or jsonb_typeof(digest) = 'object');

create table digests (
    id            uuid primary key default gen_random_uuid(),
    workspace_id  uuid not null references workspaces (id) on delete cascade,
    -- What collects: 'rule' (source_id is the rule), or another producer's kind later.
    source        text not null check (source ~ '^[a-z][a-z0-9_]{0,30}$'),
    source_id     uuid not null,
    recipient_id  text,
    target_key    text not null check (length(target_key) between 1 and 2000),
    digest_key    text not null check (length(digest_key) <= 200),
    -- A hash of (recipient, target, key): what one open digest and its items' dedupe are per.
    group_key     text not null check (length(group_key) = 64),
    -- open: collecting; closed: its action was taken (or it was full), items go to the
    -- next; flushed: sent early on request; cancelled: on request, its action with it.
    status        text not null default 'open'
                  check (status in ('open', 'closed', 'flushed', 'cancelled')),
    -- The window as configured: {"seconds": n} | {"until": "HH:MM"} |
    -- {"quiet_seconds": n, "max_seconds": m}.
    time_window   jsonb not null check (jsonb_typeof(time_window) = 'object'),
    opened_at     timestamptz not null,
    -- When the window ends (debounce: moves with each item, never past opened_at + max).
    closes_at     timestamptz not null,
    last_item_at  timestamptz,
    item_count    integer not null default 0 check (item_count >= 0),
    -- The items' size (their JSON), bounded so that re-rendering a digest stays cheap.
    item_bytes    integer not null default 0 check (item_bytes >= 0),
    action_id     uuid references scheduled_actions (id) on delete set null,
    finished_at   timestamptz,
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now()
);

create trigger digests_touch
    before update on digests
    for each row execute function tickwork_touch_updated_at();

-- At most one open digest per group: concurrent first items race on this index, the loser
-- locks the winner's row.
create unique index ux_digests_open on digests (workspace_id, source, source_id, group_key)
    where status = 'open';
-- The API's list (newest first) and the digest of an action.
create index ix_digests_workspace on digests (workspace_id, created_at desc, id desc);
create index ix_digests_action on digests (action_id) where action_id is not null;

create table digest_items (
    id            bigint generated always as identity primary key,
    digest_id     uuid not null references digests (id) on delete cascade,
    workspace_id  uuid not null references workspaces (id) on delete cascade,
    source        text not null,
    source_id     uuid not null,
    group_key     text not null,
    -- The event's id (or a hash of it): a second delivery of the same event adds nothing.
    item_key      text not null check (length(item_key) between 1 and 200),
    position      integer not null check (position >= 1),
    -- What the template sees of this item.
    data          jsonb not null check (jsonb_typeof(data) = 'object'),
    occurred_at   timestamptz not null,
    added_at      timestamptz not null default now(),
    unique (digest_id, position)
);

create unique index ux_digest_items_key on digest_items
    (workspace_id, source, source_id, group_key, item_key);

-- The change log learns two kinds: `digest` (an action made as a digest, or a debounce
-- moving it) and `flush` (sent early on request).
alter table action_changes drop constraint action_changes_kind_check;
alter table action_changes add constraint action_changes_kind_check
    check (kind in ('cancel', 'reschedule', 'defer', 'quiet_hours', 'skip', 'drop', 'exit',
                    'digest', 'flush'));

-- ------------------------------------------------------------------ row-level security

grant select, insert, update on digests to tickwork_api;
alter table digests enable row level security;
create policy digests_tenant on digests to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select, insert on digest_items to tickwork_api;
alter table digest_items enable row level security;
create policy digest_items_tenant on digest_items to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());
