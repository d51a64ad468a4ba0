-- The outbox holds a workspace's outcomes: like every table with a workspace_id, the API
-- role sees and writes only its own workspace's rows. The engine and the security-definer
-- functions that fill it (0026) are not bound by the policy.
alter table event_outbox enable row level security;
create policy event_outbox_tenant on event_outbox to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());
