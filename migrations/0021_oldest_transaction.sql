-- The operations view (GET /v1/operations) warns when an old transaction holds back the
-- stats rollup's watermark (docs/operations.md, "The stats rollup") and vacuum's clean-up.
-- The API's role sees only its own sessions in pg_stat_activity; this function, run as the
-- owner (who sees every session: a superuser or a member of pg_read_all_stats), tells it
-- when the oldest open transaction of this database started and its state, nothing else:
-- no query text, user or address. `sessions_hidden`: some session was not visible even
-- to the owner, so an older one may exist.
create function tickwork_oldest_transaction()
returns table (xact_start timestamptz, state text, sessions_hidden boolean)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select o.xact_start, o.state,
           exists (select 1 from pg_stat_activity h
                   where h.datname = current_database()
                     and h.query = '<insufficient privilege>') as sessions_hidden
    from (select 1) one
    left join lateral (
        select a.xact_start, a.state from pg_stat_activity a
        where a.datname = current_database() and a.backend_type = 'client backend'
          and a.pid <> pg_backend_pid() and a.xact_start is not null
        order by a.xact_start
        limit 1
    ) o on true
$$;

revoke execute on function tickwork_oldest_transaction() from public;
grant execute on function tickwork_oldest_transaction() to tickwork_api;
