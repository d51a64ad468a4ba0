-- Provider failover (migration 0032): what the dispatcher reads to route a claimed wave of
-- a type with fallback providers, and the circuits it writes back.

-- name: failover_history
-- The earlier attempts of a wave's rows, oldest first: which provider made each, what it
-- came to, and whether the resolver found it provably absent (requeued). Through the
-- ledger's key (action_id, attempt).
select action_id, provider, outcome, resolution = 'requeued' as settled_absent
from action_attempts
where action_id = any(%(ids)s::uuid[])
order by action_id, attempt

-- name: failover_connections
-- For each (workspace, provider) asked: the workspace's oldest active connection of that
-- provider, the one a fallback provider sends through.
select distinct on (c.workspace_id, c.provider) c.workspace_id, c.provider, c.id
from connections c
join unnest(%(workspace_ids)s::uuid[], %(providers)s::text[]) as w(workspace_id, provider)
  on c.workspace_id = w.workspace_id and c.provider = w.provider
where c.status = 'active'
order by c.workspace_id, c.provider, c.created_at, c.id

-- name: read_circuits
-- The circuits of a wave's (provider, connection) pairs; a pair without a row is closed.
-- A probe out is read with when it was taken (one taken by a dispatcher of the release
-- before migration 0033 has no time: taken when the circuit was last written).
select c.provider, c.connection_id, c.state, c.failures, c.window_started, c.opened_at,
       case when c.probing then coalesce(c.probe_taken_at, c.updated_at) end,
       c.version
from provider_circuits c
join unnest(%(providers)s::text[], %(connection_ids)s::uuid[]) as k(provider, connection_id)
  on c.provider = k.provider and c.connection_id = k.connection_id

-- name: write_circuit
-- One circuit's new state, only if it is still the version read (a new circuit: only if
-- no other dispatcher made it meanwhile). No row back: it changed; read it again.
insert into provider_circuits as c (provider, connection_id, state, failures, window_started,
                                    opened_at, probing, probe_taken_at, version)
values (%(provider)s, %(connection_id)s, %(state)s, %(failures)s, %(window_started)s,
        %(opened_at)s, %(probe_taken_at)s::timestamptz is not null, %(probe_taken_at)s, 1)
on conflict (provider, connection_id) do update
set state = excluded.state, failures = excluded.failures,
    window_started = excluded.window_started, opened_at = excluded.opened_at,
    probing = excluded.probing, probe_taken_at = excluded.probe_taken_at,
    version = c.version + 1, updated_at = now()
where c.version = %(version)s
returning c.version

-- name: circuits_status
-- Every circuit not closed, for `tickwork status` and the metric, with when a half-open
-- one's probe was taken (null: none out).
select provider, connection_id, state, failures, opened_at,
       case when probing then coalesce(probe_taken_at, updated_at) end
from provider_circuits
where state <> 'closed'
order by provider, connection_id

-- name: record_routes
-- Where each routed row of a wave is about to be sent (migration 0034), before any call:
-- the provider, the connection (null: the provider's stack-wide options) and the attempt,
-- one statement for the wave. Only the dispatcher's own claim: the row still submitted at
-- the attempt it claimed. A row not returned is not called.
update scheduled_actions a
set updated_at = now(), routed_provider = r.provider, routed_connection_id = r.connection_id,
    routed_attempt = r.attempt
from unnest(%(ids)s::uuid[], %(attempts)s::int[], %(providers)s::text[],
            %(connection_ids)s::uuid[]) as r(id, attempt, provider, connection_id)
where a.id = r.id and a.status = 'submitted' and a.attempt_count = r.attempt
returning a.id
