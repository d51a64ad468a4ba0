-- The tick's mark (enqueued_at set on a due row) becomes a HOT update, as the claim did in
-- 0014: no index names enqueued_at any more. A burst's every row is marked once; its new
-- version no longer goes into the primary key, calendar, workspace and enqueued indexes.
--
-- The due index now holds every active row by due time, in a queue or not. The tick walks
-- it with a keyset cursor across its passes (so it steps over the rows it marked instead of
-- reading them again) and skips, by a heap check, rows still in a queue from an earlier run.
-- Lost messages and zombies are found along the same index: a row is marked only when due
-- within the look-ahead, and claimed only when due within the clock-skew tolerance, and no
-- write moves a marked or claimed row's due time without clearing the mark (finalize, retry,
-- resolver), so each is a range of the due time ending at now + look-ahead (+ tolerance).
drop index ix_scheduled_actions_enqueued;
drop index ix_scheduled_actions_due;
create index ix_scheduled_actions_due on scheduled_actions
    ((coalesce(next_attempt_at, publish_at)), id)
    where finished_at is null;

-- With both indexes of active rows now partial on `finished_at is null`, Postgres 18's skip
-- scan can walk the workspace index across every workspace for the tick's due query (and
-- then sort what it read). Its predicate now also says `workspace_id is not null` (always
-- true): only a query naming a workspace implies it, so cross-workspace walks keep to the
-- due index, and a workspace's counts keep to this one.
drop index ix_scheduled_actions_active_workspace;
create index ix_scheduled_actions_active_workspace on scheduled_actions
    (workspace_id, (coalesce(next_attempt_at, publish_at)))
    where finished_at is null and workspace_id is not null;
