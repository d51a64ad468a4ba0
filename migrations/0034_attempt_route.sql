-- Which provider (and connection) a row's current attempt is calling, recorded before the
-- call (by the claim: the type's first provider; again after routing for rows sent to a
-- fallback): a dispatcher that dies during the call leaves the row `submitted` with only
-- this to say where it went. The tick's stuck recovery copies it into the attempt's ledger entry, so
-- the resolver asks that provider, through that connection (docs/failover.md).
-- `routed_attempt` is the attempt the route was recorded for: a route of an earlier
-- attempt says nothing of the current one. Null for types without failover (the type's
-- provider, through the row's connection) and for rows routed before this migration.
-- Nullable, no default, no index: adding them rewrites nothing, and the write stays HOT.
alter table scheduled_actions
    add column routed_provider text check (length(routed_provider) between 1 and 63),
    add column routed_connection_id uuid,
    add column routed_attempt integer;

-- The connection an attempt went through, when its provider is named (null: the provider's
-- stack-wide options, or an attempt recorded before this migration).
alter table action_attempts
    add column connection_id uuid;
