-- Queries of the reconciler, which keeps scheduled_actions in step with schedule_intents.
-- It holds the intent's row lock while it works on that thing, so two reconcilers never
-- work on one thing at once; every change to an action names the status it expects.

-- name: intents_to_reconcile
-- Work for one pass: intents changed since last reconciled (oldest change first), then
-- intents due for another look. An intent can appear twice; the caller keeps the first.
(select workspace_id, thing_id, 0 as priority, updated_at as since
 from schedule_intents
 where version > reconciled_version
 order by updated_at
 limit %(limit)s)
union all
(select workspace_id, thing_id, 1 as priority, recheck_at as since
 from schedule_intents
 where recheck_at <= now()
 order by recheck_at
 limit %(limit)s)
order by priority, since

-- name: lock_intent
select * from schedule_intents
where workspace_id = %(workspace_id)s and thing_id = %(thing_id)s
for update

-- name: try_lock_intent
-- The cron's lock: an intent another reconciler (or a write through the API) holds is
-- skipped, not waited for; whoever holds it reconciles it.
select * from schedule_intents
where workspace_id = %(workspace_id)s and thing_id = %(thing_id)s
for update skip locked

-- name: workspace_clock
-- The database's time (the transaction's, so one pass sees one "now") and the workspace's
-- zone, read after the intent is locked so a zone change committed before is seen.
select now() as now, timezone from workspaces where id = %(workspace_id)s

-- name: thing_actions
-- Every row of a thing, any status and any source, for the gates to read; but not the
-- occurrences of a recurring schedule naming the same thing: those are the schedule's
-- history, outside the one-active-row and publish-guard rules, and not the intent's.
select * from scheduled_actions
where workspace_id = %(workspace_id)s and thing_id = %(thing_id)s
  and recurring_schedule_id is null
order by created_at, id

-- name: cancel_for_intent
-- queued -> cancelled by the reconciler: only a row it owns (minted for an intent, never
-- retried by an admin), that never reached a provider, and at least min_age old (the age
-- gate, checked here too so a plan made a moment earlier cannot break it). error_code says
-- why: 'withdrawn' (no longer wanted) or 'superseded' (replaced by a move).
update scheduled_actions
set updated_at = now(), status = 'cancelled', finished_at = now(), error_code = %(reason)s,
    last_error = %(message)s
where id = %(id)s
  and workspace_id = %(workspace_id)s
  and status = 'queued'
  and attempt_count = 0
  and source = 'intent'
  and manual_retries = 0
  and created_at <= now() - make_interval(secs => %(min_age)s)
returning id

-- name: mark_intent_reconciled
update schedule_intents
set reconciled_version = %(version)s, reconciled_at = now(), recheck_at = %(recheck_at)s
where workspace_id = %(workspace_id)s and thing_id = %(thing_id)s
  -- bookkeeping never goes backwards, should an older pass finish last
  and reconciled_version <= %(version)s
