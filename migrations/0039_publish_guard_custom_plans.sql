-- The duplicate-publish guard (0003) looks for a published row of the same
-- (workspace, thing, target, type) before each insert of a thing's row. plpgsql caches a
-- generic plan of that lookup after a few calls; made while scheduled_actions is still small
-- (a new database, the first large insert into it), that plan reads the workspace's rows
-- through 0037's (workspace_id, id) key rather than ix_scheduled_actions_thing, and keeps
-- reading them all for every row the statement inserts: a 50,000-row insert then took
-- minutes. A plan made per call (about 60 us) always takes the thing's index.
alter function tickwork_publish_guard() set plan_cache_mode = force_custom_plan;
