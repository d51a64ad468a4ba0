-- Writes and reads of schedule_intents for the API. A trigger bumps `version` whenever what
-- the intent asks for changes; the reconciler finds changed intents by it.

-- name: get_intent
select * from schedule_intents
where workspace_id = %(workspace_id)s and thing_id = %(thing_id)s

-- name: workspace_timezone
select timezone from workspaces where id = %(workspace_id)s

-- name: insert_intent
-- A concurrent first declaration of the same thing makes this return nothing; the caller
-- then locks the row that won and updates it.
insert into schedule_intents (
    workspace_id, thing_id, action_type, targets, wall_date, wall_time, timezone,
    publish_at, payload, state, updated_by, recipient_id, transactional
) values (
    %(workspace_id)s, %(thing_id)s, %(action_type)s, %(targets)s, %(wall_date)s,
    %(wall_time)s, %(timezone)s, %(publish_at)s, %(payload)s, %(state)s, %(updated_by)s,
    %(recipient_id)s, %(transactional)s
)
on conflict (workspace_id, thing_id) do nothing
returning *

-- name: update_intent
update schedule_intents
set action_type = %(action_type)s, targets = %(targets)s, wall_date = %(wall_date)s,
    wall_time = %(wall_time)s, timezone = %(timezone)s, publish_at = %(publish_at)s,
    payload = %(payload)s, state = %(state)s, updated_by = %(updated_by)s,
    recipient_id = %(recipient_id)s, transactional = %(transactional)s
where workspace_id = %(workspace_id)s and thing_id = %(thing_id)s
returning *

-- name: unschedule_intent
-- scheduled -> unscheduled; an intent already unscheduled is left as it is.
update schedule_intents
set state = 'unscheduled', updated_by = %(updated_by)s
where workspace_id = %(workspace_id)s and thing_id = %(thing_id)s and state = 'scheduled'
returning *
