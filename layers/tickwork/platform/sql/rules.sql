-- Queries of the automation rules: rules, entities with their reference dates, and the
-- ledger of which rule made which action. The actions themselves are written through
-- tickwork.actions (schedule, cancel), never here.

-- name: insert_rule
insert into rules (
    workspace_id, name, enabled, trigger_type, event_type, entity_type, reference,
    offset_seconds, conditions, action_type, target_key, payload_template, created_by,
    recipient_template, transactional, digest, rate_limit, load
) values (
    %(workspace_id)s, %(name)s, %(enabled)s, %(trigger_type)s, %(event_type)s,
    %(entity_type)s, %(reference)s, %(offset_seconds)s, %(conditions)s, %(action_type)s,
    %(target_key)s, %(payload_template)s, %(created_by)s, %(recipient_template)s,
    %(transactional)s, %(digest)s, %(rate_limit)s, %(load)s
)
returning *

-- name: get_rule
select * from rules
where id = %(id)s and workspace_id = %(workspace_id)s and deleted_at is null

-- name: lock_rule
-- Every change of a rule takes this lock first: the producers' KEY SHARE waits for it.
select * from rules
where id = %(id)s and workspace_id = %(workspace_id)s and deleted_at is null
for update

-- name: list_rules
-- A page of a workspace's rules in (created_at, id) order, after a cursor.
select * from rules
where workspace_id = %(workspace_id)s and deleted_at is null
  and (%(enabled)s::boolean is null or enabled = %(enabled)s)
  and (%(trigger_type)s::text is null or trigger_type = %(trigger_type)s)
  and (%(after_created_at)s::timestamptz is null
       or (created_at, id) > (%(after_created_at)s, %(after_id)s::uuid))
order by created_at, id
limit %(limit)s

-- name: update_rule
update rules
set name = %(name)s, enabled = %(enabled)s, event_type = %(event_type)s,
    entity_type = %(entity_type)s, reference = %(reference)s,
    offset_seconds = %(offset_seconds)s, conditions = %(conditions)s,
    action_type = %(action_type)s, target_key = %(target_key)s,
    payload_template = %(payload_template)s, recipient_template = %(recipient_template)s,
    transactional = %(transactional)s, digest = %(digest)s, rate_limit = %(rate_limit)s,
    load = %(load)s, revision = revision + 1
where id = %(id)s and workspace_id = %(workspace_id)s and deleted_at is null
returning *

-- name: delete_rule
update rules set deleted_at = now(), enabled = false
where id = %(id)s and workspace_id = %(workspace_id)s and deleted_at is null
returning *

-- name: record_rule_error
update rules set last_error = %(message)s, last_error_at = now()
where id = %(id)s and workspace_id = %(workspace_id)s

-- name: event_rules
-- The enabled rules an event of this type fires, locked against a concurrent change of the
-- rule (which takes FOR UPDATE, then cancels the rule's rows: it waits for us, or we see
-- it as changed). KEY SHARE, so recording a rule's last error (a plain UPDATE) does not
-- wait for concurrent events, nor deadlock with them.
select * from rules
where workspace_id = %(workspace_id)s and trigger_type = 'event'
  and event_type = %(event_type)s and enabled and deleted_at is null
order by created_at, id
for key share

-- name: time_rules
-- The enabled time rules of an entity type, locked as event_rules are.
select * from rules
where workspace_id = %(workspace_id)s and trigger_type = 'time'
  and entity_type = %(entity_type)s and enabled and deleted_at is null
order by created_at, id
for key share

-- name: insert_rule_action
insert into rule_actions (
    action_id, workspace_id, rule_id, kind, idempotency_key, entity_type, entity_id,
    reference, reference_at, context
) values (
    %(action_id)s, %(workspace_id)s, %(rule_id)s, %(kind)s, %(idempotency_key)s,
    %(entity_type)s, %(entity_id)s, %(reference)s, %(reference_at)s, %(context)s
)
on conflict (action_id, workspace_id) do nothing

-- name: key_history
-- Every row made for an idempotency key, any status: the terminal-history gate reads it.
select a.*, r.rule_id, r.reference, r.reference_at, r.idempotency_key
from rule_actions r join scheduled_actions a on a.id = r.action_id
where r.workspace_id = %(workspace_id)s and r.idempotency_key = %(idempotency_key)s
order by a.created_at, a.id

-- name: live_entity_actions
-- The active rows the time rules made for one entity.
select a.*, r.rule_id, r.reference, r.reference_at, r.idempotency_key
from rule_actions r join scheduled_actions a on a.id = r.action_id
where r.workspace_id = %(workspace_id)s and r.entity_type = %(entity_type)s
  and r.entity_id = %(entity_id)s and a.status in ('queued', 'submitted')
order by a.id

-- name: live_rule_actions
-- The active rows one rule made (events and dates alike).
select a.*, r.rule_id, r.reference, r.reference_at, r.idempotency_key
from rule_actions r join scheduled_actions a on a.id = r.action_id
where r.workspace_id = %(workspace_id)s and r.rule_id = %(rule_id)s
  and a.status in ('queued', 'submitted')
order by a.id

-- name: entity_actions
-- Every row the time rules made for one entity, oldest first.
select a.*, r.rule_id, r.reference, r.reference_at, r.idempotency_key
from rule_actions r join scheduled_actions a on a.id = r.action_id
where r.workspace_id = %(workspace_id)s and r.entity_type = %(entity_type)s
  and r.entity_id = %(entity_id)s
order by a.created_at, a.id

-- name: upsert_entity
-- Create or change an entity, holding its row lock for the rest of the transaction: two
-- writes of one entity take turns.
insert into entities (workspace_id, entity_type, entity_id, timezone, context, updated_by)
values (%(workspace_id)s, %(entity_type)s, %(entity_id)s, %(timezone)s, %(context)s,
        %(updated_by)s)
on conflict (workspace_id, entity_type, entity_id) do update
set timezone = excluded.timezone, context = excluded.context, updated_by = excluded.updated_by
returning *, (xmax = 0) as created

-- name: upsert_entity_context
-- Create an entity or change its context alone (its zone and dates stay), holding its row
-- lock as upsert_entity does.
insert into entities (workspace_id, entity_type, entity_id, timezone, context, updated_by)
values (%(workspace_id)s, %(entity_type)s, %(entity_id)s, %(timezone)s, %(context)s,
        %(updated_by)s)
on conflict (workspace_id, entity_type, entity_id) do update
set context = excluded.context, updated_by = excluded.updated_by
returning *, (xmax = 0) as created

-- name: get_entity
select * from entities
where workspace_id = %(workspace_id)s and entity_type = %(entity_type)s
  and entity_id = %(entity_id)s

-- name: lock_entity
select * from entities
where workspace_id = %(workspace_id)s and entity_type = %(entity_type)s
  and entity_id = %(entity_id)s
for update

-- name: entity_dates
select name, at, wall from entity_dates
where workspace_id = %(workspace_id)s and entity_type = %(entity_type)s
  and entity_id = %(entity_id)s
order by name

-- name: clear_entity_dates
delete from entity_dates
where workspace_id = %(workspace_id)s and entity_type = %(entity_type)s
  and entity_id = %(entity_id)s

-- name: insert_entity_dates
insert into entity_dates (workspace_id, entity_type, entity_id, name, at, wall)
select %(workspace_id)s, %(entity_type)s, %(entity_id)s, d.name, d.at, d.wall
from unnest(%(names)s::text[], %(ats)s::timestamptz[], %(walls)s::timestamp[])
    as d(name, at, wall)

-- name: delete_entity
delete from entities
where workspace_id = %(workspace_id)s and entity_type = %(entity_type)s
  and entity_id = %(entity_id)s
returning entity_id

-- name: entities_for_rule
-- The entities a time rule concerns: those with its reference date, and those it has live
-- rows for; locked in key order (as PUT of an entity locks it) so a concurrent write of
-- an entity and a change of the rule take turns.
select e.* from entities e
where e.workspace_id = %(workspace_id)s
  and (
    (e.entity_type = %(entity_type)s and exists (
        select 1 from entity_dates d
        where d.workspace_id = e.workspace_id and d.entity_type = e.entity_type
          and d.entity_id = e.entity_id and d.name = %(reference)s))
    or exists (
        select 1 from rule_actions r join scheduled_actions a on a.id = r.action_id
        where r.workspace_id = e.workspace_id and r.rule_id = %(rule_id)s
          and r.entity_type = e.entity_type and r.entity_id = e.entity_id
          and a.status in ('queued', 'submitted'))
  )
order by e.entity_type, e.entity_id
for update of e

-- name: entities_by_key
-- The stored entities one event's rules read (their `load`), each with its dates, in one
-- round trip: each key by the primary key, its dates by theirs.
select e.entity_type, e.entity_id, e.timezone, e.context, d.names as date_names,
       d.ats as date_ats
from unnest(%(entity_types)s::text[], %(entity_ids)s::text[]) as k(entity_type, entity_id)
join entities e
  on e.workspace_id = %(workspace_id)s and e.entity_type = k.entity_type
 and e.entity_id = k.entity_id
left join lateral (
    select array_agg(x.name order by x.name) as names, array_agg(x.at order by x.name) as ats
    from entity_dates x
    where x.workspace_id = e.workspace_id and x.entity_type = e.entity_type
      and x.entity_id = e.entity_id
) d on true
