-- Queries over event_endpoints and the event rows (scheduled_actions of source 'event').
-- Outcomes reach the outbox (event_outbox) in the statement that makes them (migration 0026;
-- actions.sql: finalize_actions); the tick turns them into event rows (pump_events).

-- name: insert_event_endpoint
insert into event_endpoints (id, workspace_id, connection_id, event_types, action_types,
                             description, created_by)
values (%(id)s, %(workspace_id)s, %(connection_id)s, %(event_types)s, %(action_types)s,
        %(description)s, %(created_by)s)
returning *

-- name: get_event_endpoint
select p.*, c.settings ->> 'url' as url from event_endpoints p
join connections c on c.id = p.connection_id
where p.id = %(id)s and p.workspace_id = %(workspace_id)s and p.status <> 'deleted'

-- name: list_event_endpoints
select p.*, c.settings ->> 'url' as url from event_endpoints p
join connections c on c.id = p.connection_id
where p.workspace_id = %(workspace_id)s and p.status <> 'deleted'
order by p.created_at, p.id
limit %(limit)s

-- name: update_event_endpoint
-- Only the fields given change (action_types: `clear_action_types` sets it to every type).
-- The endpoint's connection follows its status, so queued events to a disabled endpoint
-- fail as connection_disabled instead of being sent.
with changed as (
    update event_endpoints
    set status = coalesce(%(status)s, status),
        event_types = coalesce(%(event_types)s, event_types),
        action_types = case when %(clear_action_types)s then null
                            else coalesce(%(action_types)s, action_types) end,
        description = coalesce(%(description)s, description),
        updated_at = now()
    where id = %(id)s and workspace_id = %(workspace_id)s and status <> 'deleted'
    returning *
), connection as (
    update connections c set status = changed.status
    from changed
    where c.id = changed.connection_id and %(status)s::text is not null
)
select changed.*, c.settings ->> 'url' as url from changed
join connections c on c.id = changed.connection_id

-- name: delete_event_endpoint
-- active|disabled -> deleted, and its connection with it: its queued events fail as
-- connection_removed (never sent).
with changed as (
    update event_endpoints
    set status = 'deleted', deleted_at = now(), updated_at = now()
    where id = %(id)s and workspace_id = %(workspace_id)s and status <> 'deleted'
    returning *
), connection as (
    update connections c set status = 'deleted', deleted_at = now()
    from changed
    where c.id = changed.connection_id
)
select changed.*, c.settings ->> 'url' as url from changed
join connections c on c.id = changed.connection_id

-- name: emit_action_events
-- Events of later states of actions (action.delivered, action.bounced), for the active
-- endpoints that asked for them, in one statement.
select tickwork_emit_events(
    array_agg(a.id order by f.ord), array_agg(f.event_type order by f.ord),
    array_agg(a.action_type order by f.ord),
    array_agg(tickwork_action_event_data(a) || f.extra order by f.ord))
from unnest(%(ids)s::uuid[], %(event_types)s::text[], %(extras)s::jsonb[])
    with ordinality as f(id, event_type, extra, ord)
join scheduled_actions a on a.id = f.id
where exists (select 1 from event_endpoints p
              where p.workspace_id = a.workspace_id and p.status = 'active')

-- name: pump_events
-- Up to `limit` outbox entries, oldest first, become event rows: one per active endpoint of
-- the workspace that asks for the event type (and the action type, when it filters), due
-- now. The event id is the row's id: the same on every attempt, so a receiver deduplicates
-- by it (webhook-id). The row's created_at is the outcome's, which orders the events of one
-- action (events_waiting_behind). Taken with skip locked: two ticks never take one entry.
with taken as (
    delete from event_outbox
    where id in (select id from event_outbox order by id limit %(limit)s
                 for update skip locked)
    returning *
), made as (
    select gen_random_uuid() as id, t.workspace_id, p.id as endpoint_id, p.connection_id,
           t.event_type, coalesce(t.data, jsonb_build_object(
               'id', a.id, 'workspace_id', a.workspace_id, 'action_type', a.action_type,
               'thing_id', a.thing_id, 'target_key', a.target_key, 'status', t.status,
               'publish_at', a.publish_at, 'finished_at', t.finished_at,
               'error_code', t.error_code, 'attempt_count', t.attempt_count,
               'provider_id', t.provider_id, 'source', a.source,
               'recipient_id', a.recipient_id, 'connection_id', a.connection_id)) as data,
           t.created_at, t.id as seq
    from taken t
    left join scheduled_actions a on t.data is null and a.id = t.subject_id
    join event_endpoints p
      on p.workspace_id = t.workspace_id and p.status = 'active'
     and t.event_type = any(p.event_types)
     and (t.action_type is null or p.action_types is null
          or t.action_type = any(p.action_types))
), inserted as (
    insert into scheduled_actions (
        id, workspace_id, action_type, target_key, payload, publish_at, source, connection_id,
        created_at
    )
    select m.id, m.workspace_id, 'event', 'endpoint:' || m.endpoint_id, jsonb_build_object(
               'id', 'evt_' || replace(m.id::text, '-', ''),
               'type', m.event_type,
               'timestamp', to_char(m.created_at at time zone 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               'data', m.data),
           now(), 'event', m.connection_id, m.created_at
    from made m
    order by m.seq
    returning 1
)
select (select count(*) from taken)::int as taken, (select count(*) from inserted)::int as made

-- name: events_waiting_behind
-- Claimed event rows with an earlier event of the same subject to the same endpoint still
-- on its way (queued or claimed): they wait, so a receiver sees one action's events in the
-- order they happened. Along ix_scheduled_actions_event_subject.
select a.id
from unnest(%(ids)s::uuid[]) as c(id)
join scheduled_actions a on a.id = c.id
where exists (
      select 1 from scheduled_actions p
      where p.source = 'event'
        and p.connection_id = a.connection_id
        and (p.payload -> 'data' ->> 'id') = (a.payload -> 'data' ->> 'id')
        and (p.created_at, p.id) < (a.created_at, a.id)
        and p.status in ('queued', 'submitted'))
