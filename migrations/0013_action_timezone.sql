-- The IANA zone an action was scheduled in (a wall date and time in that zone), so its
-- local rendering uses that zone, not the workspace's. Null: scheduled as an instant;
-- rendered in the workspace's zone.
alter table scheduled_actions add column timezone text;
