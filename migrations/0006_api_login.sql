-- The API's database login: a role with no privileges of its own that can become
-- tickwork_api and nothing else. Its sessions switch to tickwork_api per transaction
-- (SET LOCAL ROLE); RESET ROLE then leaves a role that can read nothing, and it is no member
-- of the owner, so SET ROLE cannot escape row-level security either. NOINHERIT: outside the
-- tenant transaction it holds none of tickwork_api's grants. The deploy (or the local
-- runtime) sets its password; no password lives in a migration.

do $$
begin
    create role tickwork_api_login login noinherit;
exception when duplicate_object then
    null;  -- roles are per cluster: another database on this server made it already
end;
$$;

grant tickwork_api to tickwork_api_login;
