-- Campaigns, enrollments and the actions their steps make.

-- name: insert_campaign
insert into campaigns (workspace_id, name, steps, exit_events, cap_policy, created_by)
values (%(workspace_id)s, %(name)s, %(steps)s, %(exit_events)s, %(cap_policy)s, %(created_by)s)
returning *

-- name: get_campaign
select * from campaigns where id = %(id)s and workspace_id = %(workspace_id)s

-- name: list_campaigns
select * from campaigns
where workspace_id = %(workspace_id)s
  and (%(after_created_at)s::timestamptz is null
       or (created_at, id) > (%(after_created_at)s, %(after_id)s::uuid))
order by created_at, id
limit %(limit)s

-- name: insert_enrollment
-- Idempotent per (campaign, recipient): the second enrollment returns nothing.
insert into enrollments (workspace_id, campaign_id, recipient_id, data, starts_at)
values (%(workspace_id)s, %(campaign_id)s, %(recipient_id)s, %(data)s, %(starts_at)s)
on conflict (campaign_id, recipient_id, workspace_id) do nothing
returning *

-- name: get_enrollment_of
select * from enrollments
where workspace_id = %(workspace_id)s and campaign_id = %(campaign_id)s
  and recipient_id = %(recipient_id)s

-- name: get_enrollment
select * from enrollments where id = %(id)s and workspace_id = %(workspace_id)s

-- name: get_enrollment_by_id
-- The advance pass (a worker: every workspace).
select * from enrollments where id = %(id)s

-- name: list_enrollments
select * from enrollments
where workspace_id = %(workspace_id)s and campaign_id = %(campaign_id)s
  and (%(status)s::text is null or status = %(status)s)
  and (%(after)s::uuid is null or id > %(after)s)
order by id
limit %(limit)s

-- name: set_step_action
update enrollments
set current_action_id = %(action_id)s, next_send_at = %(next_send_at)s
where id = %(id)s and current_step = %(step)s and status = 'active'

-- name: insert_enrollment_action
insert into enrollment_actions (action_id, workspace_id, enrollment_id, step_index)
values (%(action_id)s, %(workspace_id)s, %(enrollment_id)s, %(step_index)s)
on conflict do nothing

-- name: advance_enrollment
-- The optimistic lock: only the advancer that still sees the step it read moves it on.
update enrollments
set current_step = %(new_step)s, current_action_id = null, next_send_at = null
where id = %(id)s and current_step = %(old_step)s and status = 'active'
  and current_action_id is not distinct from %(action_id)s
returning *

-- name: complete_enrollment
update enrollments
set status = 'completed', completed_at = now(), current_step = %(new_step)s,
    current_action_id = null, next_send_at = null
where id = %(id)s and current_step = %(old_step)s and status = 'active'
  and current_action_id is not distinct from %(action_id)s
returning *

-- name: follow_rescheduled_step
-- A step's row moved by a person (cancel + insert) is followed, not advanced past.
update enrollments e
set current_action_id = a.id, next_send_at = a.publish_at
from scheduled_actions a
where e.id = %(id)s and e.current_action_id = %(action_id)s and e.status = 'active'
  and a.rescheduled_from = %(action_id)s and a.status in ('queued', 'submitted')
returning a.id, a.workspace_id

-- name: record_step_error
update enrollments set last_error = %(message)s where id = %(id)s

-- name: ready_steps
-- The advance pass: steps published or cancelled that it has not looked at yet.
select action_id, enrollment_id, step_index, done_at from enrollment_actions
where done_at is not null and not advanced
order by done_at
limit %(limit)s

-- name: mark_advanced
update enrollment_actions set advanced = true where action_id = %(action_id)s

-- name: exit_enrollment
update enrollments
set status = 'exited', exit_reason = %(reason)s, exited_at = now()
where id = %(id)s and workspace_id = %(workspace_id)s and status = 'active'
returning *

-- name: set_exit_outcome
update enrollments set exit_outcome = %(outcome)s where id = %(id)s
returning *

-- name: log_exit
insert into action_changes (workspace_id, action_id, enrollment_id, kind, actor, reason)
values (%(workspace_id)s, %(action_id)s, %(enrollment_id)s, 'exit', %(actor)s, %(reason)s)

-- name: update_enrollment_data
update enrollments set data = %(data)s
where id = %(id)s and workspace_id = %(workspace_id)s
returning *

-- name: exit_event_enrollments
select e.id from enrollments e
join campaigns c on c.id = e.campaign_id
where e.workspace_id = %(workspace_id)s and e.recipient_id = %(recipient_id)s
  and e.status = 'active' and %(event_type)s = any(c.exit_events)
order by e.id

-- name: steps_of_actions
-- What claim-time admission needs of drip steps: the enrollment now, the step's conditions.
select ea.action_id, ea.step_index, e.id as enrollment_id, e.status, e.data, e.recipient_id,
       e.campaign_id, r.timezone, c.steps -> ea.step_index -> 'conditions' as conditions,
       c.cap_policy
from enrollment_actions ea
join enrollments e on e.id = ea.enrollment_id
join campaigns c on c.id = e.campaign_id
join recipients r on r.workspace_id = e.workspace_id and r.recipient_id = e.recipient_id
where ea.action_id = any(%(ids)s::uuid[])

-- name: enrollment_actions
select ea.step_index, a.* from enrollment_actions ea
join scheduled_actions a on a.id = ea.action_id
where ea.enrollment_id = %(enrollment_id)s
order by ea.step_index, a.created_at

-- name: active_enrollments_of_campaign
-- A campaign's running enrollments, a batch at a time, for a bulk cancel to exit
-- (ix_enrollments_active_campaign). SKIP LOCKED: one being exited or advanced this instant
-- is left to the next batch.
select id from enrollments
where campaign_id = %(campaign_id)s and workspace_id = %(workspace_id)s and status = 'active'
limit %(limit)s
for update skip locked

-- name: active_enrollments_of_recipient
-- The same for a recipient's running enrollments in every campaign (ix_enrollments_recipient).
select id from enrollments
where workspace_id = %(workspace_id)s and recipient_id = %(recipient_id)s and status = 'active'
limit %(limit)s
for update skip locked

-- name: wait_for_step
-- A step decided when it is due (a digest or a limit): no row yet, the enrollment waits
-- for `next_send_at` with no current action (ix_enrollments_waiting).
update enrollments set next_send_at = %(at)s
where id = %(id)s and current_step = %(step)s and status = 'active'
  and current_action_id is null

-- name: waiting_enrollments
-- The advance pass: enrollments whose waiting step is due (ix_enrollments_waiting).
select id from enrollments
where status = 'active' and current_action_id is null and next_send_at <= %(now)s
order by next_send_at
limit %(limit)s

-- name: lock_waiting_enrollment
-- One of them, if it still waits: of two concurrent passes one decides the step, the other
-- skips it (and then finds it moved on).
select * from enrollments
where id = %(id)s and status = 'active' and current_action_id is null
  and next_send_at <= %(now)s
for update skip locked

-- name: log_step_change
-- What became of a step decided when due: collected into a digest (`digest`, the digest's
-- action), dropped by its limit (`drop`) or skipped by its conditions (`skip`).
insert into action_changes (workspace_id, action_id, enrollment_id, kind, actor, reason)
values (%(workspace_id)s, %(action_id)s, %(enrollment_id)s, %(kind)s,
        tickwork_actor('sequence'), %(reason)s)
