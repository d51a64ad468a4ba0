-- The removal of finished history (tickwork.engine.retention): a workspace's finished rows
-- older than its retention are read (no lock), archived, then locked without waiting and
-- deleted with what hangs on them, a bounded batch per short transaction.

-- name: retention_workspaces
-- Workspaces removal may touch, each with its retention in days (its own or the stack's).
-- A workspace under legal hold is left out here, and again in the lock below.
select id, coalesce(retention_days, %(default_days)s::int) as retention_days
from workspaces
where not legal_hold
order by id

-- name: retention_candidates
-- The next finished rows of one workspace older than the cutoff (by when they finished and
-- when they were due: a row cancelled long before its time stays until that time is old
-- too), in due order after (after_at, after_id), along the workspace's range of
-- ix_scheduled_actions_calendar (workspace_id, publish_at, id) before the cutoff: a row
-- due then is finished, but for the rare one still in flight, or finished late.
-- Left out: a row something live still refers to: a row rescheduled from it (the lineage's
-- foreign key), a running enrollment's current step, a step of an enrollment still running
-- or not yet advanced past. (A finished enrollment's current step leaves: the enrollment
-- keeps its record, its current_action_id cleared. A digest collects only while its action
-- is queued: one whose action finished is closed, even if its row still says open until
-- the group's next item, and leaves with its action.)
select a.id, a.updated_at, a.publish_at
from scheduled_actions a
where a.workspace_id = %(workspace_id)s
  and a.publish_at < %(cutoff)s
  and (a.publish_at, a.id) > (%(after_at)s, %(after_id)s::uuid)
  and a.finished_at < %(cutoff)s
  and not exists (select 1 from scheduled_actions c where c.rescheduled_from = a.id)
  and not exists (
      select 1 from enrollments e where e.current_action_id = a.id and e.status = 'active')
  and not exists (
      select 1 from enrollment_actions ea join enrollments e on e.id = ea.enrollment_id
      where ea.action_id = a.id
        and (e.status = 'active' or (ea.done_at is not null and not ea.advanced)))
order by a.publish_at, a.id
limit %(limit)s

-- name: archive_actions
-- Each row as Postgres writes it as JSON (to_jsonb): what the archive keeps, line for line.
select a.id, a.finished_at, to_jsonb(a)::text as line
from scheduled_actions a
where a.id = any(%(ids)s::uuid[])
order by a.finished_at, a.id

-- name: archive_attempts
select t.action_id, to_jsonb(t)::text as line
from action_attempts t
where t.action_id = any(%(ids)s::uuid[])
order by t.action_id, t.attempt

-- name: archive_changes
select c.action_id, to_jsonb(c)::text as line
from action_changes c
where c.action_id = any(%(ids)s::uuid[])
order by c.id

-- name: archive_rule_actions
select r.action_id, to_jsonb(r)::text as line
from rule_actions r
where r.action_id = any(%(ids)s::uuid[])
order by r.action_id

-- name: archive_enrollment_actions
select e.action_id, to_jsonb(e)::text as line
from enrollment_actions e
where e.action_id = any(%(ids)s::uuid[])
order by e.action_id

-- name: archive_digests
-- Digests whose action leaves (none is collecting: their actions are finished).
select d.action_id, to_jsonb(d)::text as line
from digests d
where d.action_id = any(%(ids)s::uuid[])
order by d.action_id, d.id

-- name: archive_digest_items
select d.action_id, to_jsonb(i)::text as line
from digest_items i join digests d on d.id = i.digest_id
where d.action_id = any(%(ids)s::uuid[])
order by d.action_id, i.id

-- name: retention_lock
-- The archived rows still as they were archived (same updated_at), still finished and old,
-- still referred to by nothing live, their workspace not under legal hold: locked, a row
-- someone else holds skipped (never waited for; it is looked at again next run).
-- (The rows are found by id, through the primary key; each one's archived updated_at is
-- looked up in the array beside the ids.)
select a.id
from scheduled_actions a
where a.id = any(%(ids)s::uuid[])
  and a.updated_at = (%(updated_ats)s::timestamptz[])[array_position(%(ids)s::uuid[], a.id)]
  and a.workspace_id = %(workspace_id)s
  and a.finished_at < %(cutoff)s
  and a.publish_at < %(cutoff)s
  and not exists (select 1 from workspaces w where w.id = a.workspace_id and w.legal_hold)
  and not exists (select 1 from scheduled_actions c where c.rescheduled_from = a.id)
  and not exists (
      select 1 from enrollments e where e.current_action_id = a.id and e.status = 'active')
  and not exists (
      select 1 from enrollment_actions ea join enrollments e on e.id = ea.enrollment_id
      where ea.action_id = a.id
        and (e.status = 'active' or (ea.done_at is not null and not ea.advanced)))
for update of a skip locked

-- name: retention_release_enrollments
-- A finished enrollment whose current step leaves lets go of it (its foreign key); a
-- running one holds it, and the delete then fails and gives way (the candidates leave such
-- a row out next run).
update enrollments
set current_action_id = null
where current_action_id = any(%(ids)s::uuid[]) and status <> 'active'

-- name: retention_delete_digests
-- Their items go with them (on delete cascade). A group's next item, if it holds one of
-- them, is waited for at most the lock timeout (the batch then gives way).
delete from digests
where action_id = any(%(ids)s::uuid[])

-- name: retention_delete_actions
-- Attempts go with the rows (statement trigger), change-log entries, rule results, drip
-- step links and cap slots by their foreign keys' cascade.
delete from scheduled_actions
where id = any(%(ids)s::uuid[])
returning id

-- name: retention_session
-- The removal's transaction waits at most 100 ms for a lock (it then gives way and tries
-- the rows again next run) and runs a statement at most 30 s.
select set_config('lock_timeout', '100ms', true),
       set_config('statement_timeout', '30s', true)

-- name: retention_now
select now()
