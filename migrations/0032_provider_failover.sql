-- Provider failover: each provider's circuit, and which provider made each ledger attempt
-- and why it was not the type's first.

-- One circuit per (provider, connection); a row that names no connection goes through the
-- stack's options, the nil connection id. `version` makes every change a conditional
-- update: a dispatcher writes the circuit it read, or reads it again. Engine-only: the
-- operator reads it (`tickwork status`); a tenant sees its attempts' provider, not these.
create table provider_circuits (
    provider        text not null check (length(provider) between 1 and 63),
    connection_id   uuid not null,
    state           text not null default 'closed'
                    check (state in ('closed', 'open', 'half_open')),
    failures        integer not null default 0 check (failures >= 0),
    window_started  timestamptz,
    opened_at       timestamptz,
    probing         boolean not null default false,
    version         bigint not null default 0,
    updated_at      timestamptz not null default now(),
    primary key (provider, connection_id),
    constraint provider_circuits_open_when_opened
        check ((state = 'closed') = (opened_at is null))
);

-- Null for attempts of types without failover and for those recorded before: the type's
-- provider made them. The reason is null when the attempt went to the first provider or
-- to the one an earlier attempt of the row may have reached.
alter table action_attempts
    add column provider text check (length(provider) between 1 and 63),
    add column failover_reason text check (failover_reason in ('threshold', 'circuit_open'));
