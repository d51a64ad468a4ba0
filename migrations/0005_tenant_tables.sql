-- Row-level security and API grants for the tenant tables added after 0002, on the same
-- pattern: the API's role sees and writes only the workspace of its transaction.

grant select, insert, update on recurring_schedules to tickwork_api;
alter table recurring_schedules enable row level security;
create policy recurring_schedules_tenant on recurring_schedules to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select, insert, update on schedule_intents to tickwork_api;
alter table schedule_intents enable row level security;
create policy schedule_intents_tenant on schedule_intents to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

-- A thing an intent describes belongs to one workspace: its id (the app's own id for the
-- post or booking) is unique across workspaces, so another workspace naming it is refused
-- rather than given a second, independent intent for the same thing.
create unique index ux_schedule_intents_thing on schedule_intents (thing_id);
