-- Queries over recurring_schedules and the scheduled_actions rows they make. Every status
-- change names the status it expects; callers hold the schedule's row lock, so a schedule's
-- edit, pause and expansion never interleave.

-- name: insert_schedule
insert into recurring_schedules (
    workspace_id, created_by, action_type, target_key, thing_id, payload_template, rrule,
    dtstart, timezone, until, last_materialized_through, max_failures_before_pause,
    catch_up_window_seconds, connection_id, recipient_id, transactional, timezone_from,
    render_payload, occurrence_count, tags
) values (
    %(workspace_id)s, %(created_by)s, %(action_type)s, %(target_key)s, %(thing_id)s,
    %(payload_template)s, %(rrule)s, %(dtstart)s, %(timezone)s, %(until)s,
    %(last_materialized_through)s, %(max_failures_before_pause)s, %(catch_up_window_seconds)s,
    %(connection_id)s, %(recipient_id)s, %(transactional)s, %(timezone_from)s,
    %(render_payload)s, %(occurrence_count)s, %(tags)s::text[]
)
returning *

-- name: get_schedule
select * from recurring_schedules
where id = %(id)s and workspace_id = %(workspace_id)s

-- name: lock_schedule
select * from recurring_schedules
where id = %(id)s and workspace_id = %(workspace_id)s
for update

-- name: list_schedules
-- Keyset pagination in (created_at, id) order.
select * from recurring_schedules
where workspace_id = %(workspace_id)s
  and (%(status)s::text is null or status = %(status)s)
  and (%(action_type)s::text is null or action_type = %(action_type)s)
  and (%(after_created_at)s::timestamptz is null
       or (created_at, id) > (%(after_created_at)s, %(after_id)s::uuid))
order by created_at, id
limit %(limit)s

-- name: update_schedule_definition
-- An edit. The status is unchanged; the definition and the expansion state are replaced.
update recurring_schedules
set target_key = %(target_key)s, thing_id = %(thing_id)s,
    payload_template = %(payload_template)s, rrule = %(rrule)s, dtstart = %(dtstart)s,
    timezone = %(timezone)s, until = %(until)s,
    max_failures_before_pause = %(max_failures_before_pause)s,
    catch_up_window_seconds = %(catch_up_window_seconds)s,
    last_materialized_through = %(last_materialized_through)s,
    expansion_anchor = %(expansion_anchor)s,
    occurrence_count = %(occurrence_count)s,
    timezone_from = %(timezone_from)s,
    recipient_id = %(recipient_id)s, transactional = %(transactional)s,
    render_payload = %(render_payload)s,
    revision = revision + 1
where id = %(id)s and status = %(expected_status)s
returning *

-- name: record_expansion
-- After an expansion: materialized (or skipped) up to the new instant.
update recurring_schedules
set last_materialized_through = %(through)s,
    expansion_anchor = %(anchor)s,
    skipped_occurrences = skipped_occurrences + %(skipped)s,
    occurrence_count = occurrence_count + %(occurrences)s
where id = %(id)s and status = 'active'
  and last_materialized_through = %(expected_through)s
returning *

-- name: pause_schedule
-- active -> paused. Nothing is materialized past the pause, so a resume catches up from it.
update recurring_schedules
set status = 'paused', paused_reason = %(reason)s, paused_at = %(now)s,
    last_materialized_through = least(last_materialized_through, %(now)s)
where id = %(id)s and status = 'active'
returning *

-- name: pause_schedules_of_parent
-- active -> paused for at most `limit` of a workspace's schedules that carry a tag, or
-- whose occurrences go to a recipient (a bulk cancel of that tag or recipient: it cancels
-- their queued occurrences, and an active schedule would make the next ones). As
-- pause_schedule does for one, nothing is materialized past the pause. The rows are locked
-- in id order (an expansion or an edit in progress is waited for: it is short), and the
-- update names the status it expects, so a second call pauses nothing twice. A
-- workspace's schedules are few (a quota): its range of the (workspace_id, id) index.
with picked as (
    select id
    from recurring_schedules
    where workspace_id = %(workspace_id)s and status = 'active'
      and (%(tag)s::text is null or tags @> array[%(tag)s::text])
      and (%(recipient_id)s::text is null or recipient_id = %(recipient_id)s)
      and (%(action_type)s::text is null or action_type = %(action_type)s)
      and (%(target_key)s::text is null or target_key = %(target_key)s)
      and (%(thing_id)s::text is null or thing_id = %(thing_id)s)
    order by id
    limit %(limit)s
    for update
), paused as (
    update recurring_schedules s
    set status = 'paused', paused_reason = %(reason)s, paused_at = %(now)s,
        last_materialized_through = least(s.last_materialized_through, %(now)s)
    from picked p
    where s.id = p.id and s.workspace_id = %(workspace_id)s and s.status = 'active'
    returning s.id
)
-- In id order, as they were picked (an update returns its rows in no promised order).
select id from paused order by id

-- name: resume_schedule
-- paused -> active, with a fresh failure count (and, for a schedule that renders its
-- payload, its occurrences counted again up to where it resumes from).
update recurring_schedules
set status = 'active', paused_reason = null, paused_at = null, consecutive_failures = 0,
    occurrence_count = coalesce(%(occurrence_count)s, occurrence_count)
where id = %(id)s and status = 'paused'
returning *

-- name: end_schedule
-- active | paused -> ended (the caller names which).
update recurring_schedules
set status = 'ended', ended_reason = %(reason)s, ended_at = %(now)s,
    paused_reason = null, paused_at = null,
    last_materialized_through = least(last_materialized_through, %(now)s)
where id = %(id)s and status = %(expected_status)s
returning *

-- name: cancel_future_occurrences
-- queued -> cancelled for a schedule's occurrences after `now` (an edit). A past
-- occurrence still being retried keeps going; run-now rows are one-offs and stay.
update scheduled_actions
set updated_at = now(), status = 'cancelled', finished_at = now()
where recurring_schedule_id = %(id)s
  and source = 'recurring'
  and status = 'queued'
  and publish_at > %(now)s
  and not cancelled  -- implied by the status: lets the occurrence index serve
returning id

-- name: cancel_undue_rows
-- queued -> cancelled for every row of a schedule not yet due, retries included (pause,
-- end). Rows already due are left to fire: they may be in a dispatcher's hands, and the
-- tick's expiry works on them (never the same rows, so the two cannot deadlock).
update scheduled_actions
set updated_at = now(), status = 'cancelled', finished_at = now()
where recurring_schedule_id = %(id)s
  and source = 'recurring'
  and status = 'queued'
  and coalesce(next_attempt_at, publish_at) > %(now)s
  and not cancelled  -- implied by the status: lets the occurrence index serve
returning id

-- name: insert_occurrences
-- One row per occurrence, from the locked schedule's template: at its time (moved out of
-- the recipient's quiet hours, the rule's instant then kept as original_publish_at), with
-- its rendered payload (none: the template as it is). An occurrence that already has a
-- live row is dropped alone (ON CONFLICT on the partial unique index), the rest go in.
insert into scheduled_actions (
    workspace_id, created_by, action_type, thing_id, target_key, payload, publish_at,
    original_publish_at, source, recurring_schedule_id, connection_id, recipient_id,
    transactional, tags
)
select s.workspace_id, s.created_by, s.action_type, s.thing_id, s.target_key,
       coalesce(o.payload, s.payload_template), o.publish_at, o.original_publish_at,
       'recurring', s.id, s.connection_id, s.recipient_id, s.transactional, s.tags
from recurring_schedules s
cross join unnest(%(publish_ats)s::timestamptz[], %(original_publish_ats)s::timestamptz[],
                  %(payloads)s::jsonb[]) as o (publish_at, original_publish_at, payload)
where s.id = %(id)s
on conflict (recurring_schedule_id, (coalesce(original_publish_at, publish_at)), workspace_id)
    where recurring_schedule_id is not null and source = 'recurring' and not cancelled
    do nothing
returning id

-- name: schedules_to_expand
-- The expander's next batch of ids: active schedules not yet materialized through the
-- horizon, least recently expanded first; ids already handled in this run are left out.
select id from recurring_schedules
where status = 'active'
  and last_materialized_through < %(horizon)s
  and id <> all(%(exclude)s::uuid[])
order by last_materialized_through, id
limit %(batch_size)s

-- name: lock_schedule_to_expand
-- One schedule of the batch, if it still needs expanding and nobody holds it (another
-- expander, or a user's edit in progress: SKIP LOCKED). The lock lasts one schedule's
-- expansion, so a dispatcher recording an outcome for it never waits long.
select * from recurring_schedules
where id = %(id)s and status = 'active' and last_materialized_through < %(horizon)s
for update skip locked

-- name: projectable_schedules
-- Active schedules whose rule may fire in [from, to) beyond what the expander has made
-- (the calendar projects those occurrences), in creation order along the workspace's index.
select * from recurring_schedules
where workspace_id = %(workspace_id)s
  and status = 'active'
  and last_materialized_through < %(to)s
  and (until is null or until >= %(from)s)
  and (%(action_type)s::text is null or action_type = %(action_type)s)
order by created_at, id
limit %(limit)s
