-- Suppression: per workspace, the addresses that must not be messaged, each with why and
-- where from. Hard bounces, complaints and STOP replies add to it automatically (from the
-- providers' status callbacks), unsubscribe links add `unsubscribed`, people add `manual`.
--
-- Keyed by (workspace, channel, address, scope) with the address normalized by
-- tickwork.suppression.model.normalize_address (an email's addr-spec lowercased, a phone
-- number in E.164), so the claim's check is one index probe per address.
create table suppressions (
    workspace_id  uuid not null references workspaces (id) on delete cascade,
    -- The kind of address: an email address or a phone number (SMS).
    channel       text not null check (channel in ('email', 'sms')),
    address       text not null check (length(address) between 1 and 320),
    -- What the address must not receive: everything (`all`), or only one campaign's or one
    -- rule's messages (an unsubscribe link scoped to it): `campaign:<uuid>`, `rule:<uuid>`.
    scope         text not null default 'all'
                  check (scope = 'all' or scope ~ '^(campaign|rule):[0-9a-f-]{36}$'),
    reason        text not null
                  check (reason in ('hard_bounce', 'complaint', 'unsubscribed', 'stop_reply',
                                    'manual')),
    -- Who or what added it: `postmark:<connection id>`, `twilio:<connection id>`,
    -- `ses:<connection id>`, `unsubscribe:<scope>`, `user:<subject>`.
    source        text not null check (length(source) between 1 and 300),
    -- A short sanitized note (the provider's bounce type, a person's reason); never a body.
    detail        text check (length(detail) <= 300),
    created_at    timestamptz not null default now(),
    primary key (workspace_id, channel, address, scope)
);

create index ix_suppressions_created on suppressions (workspace_id, created_at desc, channel, address);

grant select, insert, update, delete on suppressions to tickwork_api;
alter table suppressions enable row level security;
create policy suppressions_tenant on suppressions to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());
