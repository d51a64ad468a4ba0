-- Delivery feedback: what the provider said after it accepted a message (delivered,
-- bounced, complained, undelivered), from its own status callbacks to
-- POST /v1/callbacks/{connection_id} (tickwork.feedback).
--
-- The state is a later state of the attempt that published the row, in its ledger entry
-- (action_attempts). States are ranked (delivery_rank) and an entry only moves up: a late
-- `sent` after `delivered`, or a duplicate, changes nothing. Adding nullable columns
-- without a default rewrites nothing.
alter table action_attempts
    add column delivery_status text
        check (delivery_status in ('sent', 'delivered', 'undelivered', 'bounced', 'complained')),
    -- A bounce's kind: hard (the address does not exist: suppressed) or soft (try later).
    add column delivery_bounce text check (delivery_bounce in ('hard', 'soft')),
    add column delivery_rank smallint check (delivery_rank between 1 and 10),
    -- The provider's time for the event (when it says none: when it reached us).
    add column delivery_at timestamptz,
    add column delivery_detail text check (length(delivery_detail) <= 300),
    add column delivery_received_at timestamptz,
    add constraint action_attempts_delivery_whole
        check ((delivery_status is null) = (delivery_rank is null)
               and (delivery_bounce is null or delivery_status = 'bounced'));

-- A callback names the provider's message id: the row is found by it, within the
-- connection the callback came to. Partial: only rows a provider accepted through a
-- connection have both. The finalize that sets provider_id is not a HOT update anyway (it
-- writes finished_at, which other indexes name), so this costs one index entry per
-- published row and nothing to the tick's mark or the claim.
create index ix_scheduled_actions_provider_message on scheduled_actions (connection_id, provider_id)
    where provider_id is not null and connection_id is not null;

-- Callbacks already seen, by the provider's own identity of the event (a Postmark bounce's
-- ID, an SNS MessageId, a Twilio message's sid and status): a retried or replayed callback
-- is counted as a duplicate and changes nothing (no suppression is added again after a
-- person removed it). Kept for TICKWORK_CALLBACK_RECEIPT_DAYS; each callback removes a
-- few of its connection's expired receipts, along the second index.
create table callback_receipts (
    connection_id  uuid not null references connections (id) on delete cascade,
    event_key      text not null check (length(event_key) between 1 and 300),
    workspace_id   uuid not null references workspaces (id) on delete cascade,
    received_at    timestamptz not null default now(),
    primary key (connection_id, event_key)
);
create index ix_callback_receipts_age on callback_receipts (connection_id, received_at);

-- What callbacks came to, per connection (shown in the connection's answer): applied (a
-- state moved or an address was suppressed), stale (a state that ranks no higher: late or
-- reordered), duplicate, unmatched (no row sent through this connection has that message
-- id), ignored (an event Tickwork does not track: opens, clicks), unverified (a forged or
-- unverifiable callback: refused with 401). Spread over a few shards so concurrent
-- callbacks of one connection do not queue on one row lock; the answer sums them.
create table callback_counts (
    connection_id  uuid not null references connections (id) on delete cascade,
    outcome        text not null
                   check (outcome in ('applied', 'stale', 'duplicate', 'unmatched', 'ignored',
                                      'unverified')),
    shard          smallint not null check (shard between 0 and 7),
    workspace_id   uuid not null references workspaces (id) on delete cascade,
    count          bigint not null default 0,
    last_at        timestamptz not null default now(),
    primary key (connection_id, outcome, shard)
);

grant select, insert, update, delete on callback_receipts to tickwork_api;
alter table callback_receipts enable row level security;
create policy callback_receipts_tenant on callback_receipts to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select, insert, update on callback_counts to tickwork_api;
alter table callback_counts enable row level security;
create policy callback_counts_tenant on callback_counts to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

-- A callback comes from the provider, with no token naming a workspace: the API's role
-- learns the connection's row (workspace, provider, settings, where its secrets are) from
-- its id alone, and then acts inside that workspace's tenant transaction. Run as the owner;
-- it returns one connection by id and nothing else.
create function tickwork_callback_connection(p_connection_id uuid)
returns setof connections
language sql stable security definer set search_path = pg_catalog, public as $$
    select * from connections where id = p_connection_id
$$;

revoke execute on function tickwork_callback_connection(uuid) from public;
grant execute on function tickwork_callback_connection(uuid) to tickwork_api;
