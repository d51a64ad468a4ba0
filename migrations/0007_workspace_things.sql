-- A thing id is the app's own id, scoped to its workspace: two workspaces may both have a
-- "post-1", each with its own intent, rows and gates. The key of schedule_intents stays
-- (workspace_id, thing_id); the index that made ids unique across workspaces goes, so
-- another workspace's id is never an existence oracle (it is simply not found here).
drop index if exists ux_schedule_intents_thing;
