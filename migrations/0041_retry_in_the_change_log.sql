-- The change log records an admin's retry (issue 49, item 11): who retried a failed action,
-- when, and the failure it retried, so `why` can tell "refused by attempt 1", "retried by
-- alice", "published by attempt 2" in order. The retry statements write the entry
-- themselves (retry_action, bulk_retry_actions), in the statement that moves the row: no
-- trigger is added on scheduled_actions (the hot path's triggers stay as they are).
alter table action_changes drop constraint action_changes_kind_check;
alter table action_changes add constraint action_changes_kind_check
    check (kind in ('cancel', 'reschedule', 'defer', 'quiet_hours', 'skip', 'drop', 'exit',
                    'digest', 'flush', 'throttled', 'retry'));
