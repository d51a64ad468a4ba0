-- The dispatch hot path's writes (the tick's mark, the claim, the finalize) stamp updated_at
-- themselves. The touch trigger's plpgsql call cost about a microsecond per row and write,
-- three times per action; it now runs only for an update that leaves updated_at as it was,
-- so every other write is stamped as before.
drop trigger scheduled_actions_touch on scheduled_actions;
create trigger scheduled_actions_touch
    before update on scheduled_actions
    for each row
    when (new.updated_at is not distinct from old.updated_at)
    execute function tickwork_touch_updated_at();
