-- Recipients, their daily counters, and the claim-time admission of their messages.

-- name: put_recipient
insert into recipients as r (workspace_id, recipient_id, timezone, quiet_hours, caps, cap_policy)
values (%(workspace_id)s, %(recipient_id)s, %(timezone)s, %(quiet_hours)s, %(caps)s,
        %(cap_policy)s)
on conflict (workspace_id, recipient_id) do update
set timezone = excluded.timezone, quiet_hours = excluded.quiet_hours, caps = excluded.caps,
    cap_policy = excluded.cap_policy
returning *, (xmax = 0) as created

-- name: get_recipient
select * from recipients where workspace_id = %(workspace_id)s and recipient_id = %(recipient_id)s

-- name: list_recipients
select * from recipients
where workspace_id = %(workspace_id)s
  and (%(after)s::text is null or recipient_id > %(after)s)
order by recipient_id
limit %(limit)s

-- name: delete_recipient
delete from recipients where workspace_id = %(workspace_id)s and recipient_id = %(recipient_id)s
returning recipient_id

-- name: recipient_counts
-- What a recipient was sent per channel on recent local days.
select channel, day, sent from recipient_day_counts
where workspace_id = %(workspace_id)s and recipient_id = %(recipient_id)s
  and day >= %(since)s
order by day, channel

-- name: recipients_of_actions
-- The recipients of a claimed batch (one per workspace and recipient id).
select r.* from recipients r
join unnest(%(workspace_ids)s::uuid[], %(recipient_ids)s::text[]) as k(ws, rid)
  on r.workspace_id = k.ws and r.recipient_id = k.rid

-- name: take_cap_slots
select action_id, admitted from tickwork_take_cap_slots(
    %(workspace_ids)s::uuid[], %(action_ids)s::uuid[], %(recipients)s::text[],
    %(channels)s::text[], %(days)s::date[], %(caps)s::int[])

-- name: cancel_reverted
-- Claimed rows handed back (queued again, never sent) cancelled at once with a reason:
-- skipped at fire time, dropped by a cap, their enrollment exited.
update scheduled_actions a
set updated_at = now(), status = 'cancelled', finished_at = now(), error_code = f.code, last_error = f.message,
    enqueued_at = null
from unnest(%(ids)s::uuid[], %(codes)s::text[], %(messages)s::text[]) as f(id, code, message)
where a.id = f.id and a.status = 'queued'

-- name: log_defers
insert into action_changes (workspace_id, action_id, kind, actor, reason, old_at, new_at)
select a.workspace_id, a.id, 'defer', 'system:recipient_policy', f.reason, f.old_at, f.new_at
from unnest(%(ids)s::uuid[], %(reasons)s::text[], %(old_ats)s::timestamptz[],
            %(new_ats)s::timestamptz[]) as f(id, reason, old_at, new_at)
join scheduled_actions a on a.id = f.id
