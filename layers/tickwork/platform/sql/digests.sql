-- Queries of digests (tickwork.digests): the open digest of a group, its items, and the
-- conditional updates of its action while that action is still queued.

-- name: lock_open_digest
-- The open digest of a group, locked: every item of the group takes turns here.
select * from digests
where workspace_id = %(workspace_id)s and source = %(source)s and source_id = %(source_id)s
  and group_key = %(group_key)s and status = 'open'
for update

-- name: open_digest
-- A group's first item opens its digest; a concurrent first item finds the unique open
-- index taken, inserts nothing, and locks the winner's row instead.
insert into digests (
    workspace_id, source, source_id, recipient_id, target_key, digest_key, group_key,
    time_window, opened_at, closes_at
) values (
    %(workspace_id)s, %(source)s, %(source_id)s, %(recipient_id)s, %(target_key)s,
    %(digest_key)s, %(group_key)s, %(time_window)s, %(opened_at)s, %(closes_at)s
)
on conflict do nothing
returning *

-- name: add_digest_item
-- An item, unless this group already has it (a second delivery of the same event).
insert into digest_items (
    digest_id, workspace_id, source, source_id, group_key, item_key, position, data,
    occurred_at
) values (
    %(digest_id)s, %(workspace_id)s, %(source)s, %(source_id)s, %(group_key)s, %(item_key)s,
    %(position)s, %(data)s, %(occurred_at)s
)
on conflict (workspace_id, source, source_id, group_key, item_key) do nothing
returning position

-- name: digest_items
select * from digest_items
where digest_id = %(digest_id)s and workspace_id = %(workspace_id)s
order by position

-- name: digest_item_data
select data from digest_items
where digest_id = %(digest_id)s and workspace_id = %(workspace_id)s
order by position

-- name: count_digest_item
update digests
set item_count = %(position)s, item_bytes = item_bytes + %(bytes)s, last_item_at = %(at)s,
    closes_at = %(closes_at)s
where id = %(id)s and status = 'open'
returning *

-- name: attach_digest_action
update digests set action_id = %(action_id)s
where id = %(id)s and status = 'open'
returning *

-- name: close_digest
-- open -> closed, flushed or cancelled.
update digests set status = %(status)s, finished_at = now()
where id = %(id)s and workspace_id = %(workspace_id)s and status = 'open'
returning *

-- name: refill_digest_action
-- A new item re-renders the digest's action while it is still queued: a dispatcher that
-- claimed it first (queued -> submitted) has the row locked or changed, and this update
-- then finds it not queued and changes nothing. A due time that moves (debounce) leaves
-- the queue's message stale: the row goes back to the tick (enqueued_at null), which sends
-- it at its new time; the stale message's claim finds the row not yet due. Only the holder
-- of the digest's lock moves the row, so the time it had is the one read here.
update scheduled_actions a
set payload = %(payload)s,
    publish_at = coalesce(%(publish_at)s, a.publish_at),
    original_publish_at = case when %(publish_at)s::timestamptz is null
                               then a.original_publish_at
                               else %(original_publish_at)s end,
    enqueued_at = case when %(publish_at)s::timestamptz is null
                         or %(publish_at)s::timestamptz = a.publish_at
                       then a.enqueued_at end,
    updated_at = now()
from (select id, publish_at from scheduled_actions where id = %(id)s) as before
where a.id = before.id and a.workspace_id = %(workspace_id)s and a.status = 'queued'
  and a.next_attempt_at is null
returning a.id, a.publish_at, before.publish_at as old_publish_at

-- name: flush_digest_action
-- Due now, in place, while still queued; back to the tick, whose next pass sends it.
update scheduled_actions
set publish_at = least(publish_at, %(now)s), original_publish_at = null,
    enqueued_at = null, updated_at = now()
where id = %(id)s and workspace_id = %(workspace_id)s and status = 'queued'
returning id, publish_at

-- name: log_digest_change
insert into action_changes (workspace_id, action_id, kind, actor, reason, old_at, new_at)
values (%(workspace_id)s, %(action_id)s, %(kind)s, tickwork_actor(%(source)s), %(reason)s,
        %(old_at)s, %(new_at)s)

-- name: get_digest
select d.*, a.status as action_status,
       case when d.status = 'open' and (a.id is null or a.status <> 'queued')
            then case when a.status = 'cancelled' then 'cancelled' else 'closed' end
            else d.status end as state
from digests d left join scheduled_actions a on a.id = d.action_id
where d.id = %(id)s and d.workspace_id = %(workspace_id)s

-- name: lock_digest
select * from digests
where id = %(id)s and workspace_id = %(workspace_id)s
for update

-- name: digest_of_action
select d.*, a.status as action_status,
       case when d.status = 'open' and (a.id is null or a.status <> 'queued')
            then case when a.status = 'cancelled' then 'cancelled' else 'closed' end
            else d.status end as state
from digests d left join scheduled_actions a on a.id = d.action_id
where d.action_id = %(action_id)s and d.workspace_id = %(workspace_id)s

-- name: list_digests
-- A page of a workspace's digests, newest first, after a cursor. `open` means collecting:
-- an open digest whose action a dispatcher took reads as closed.
select d.*, a.status as action_status,
       case when d.status = 'open' and (a.id is null or a.status <> 'queued')
            then case when a.status = 'cancelled' then 'cancelled' else 'closed' end
            else d.status end as state
from digests d left join scheduled_actions a on a.id = d.action_id
where d.workspace_id = %(workspace_id)s
  and (%(source_id)s::uuid is null or d.source_id = %(source_id)s)
  and (%(recipient_id)s::text is null or d.recipient_id = %(recipient_id)s)
  and (%(state)s::text is null
       or %(state)s = case when d.status = 'open' and (a.id is null or a.status <> 'queued')
                           then case when a.status = 'cancelled' then 'cancelled' else 'closed' end
                           else d.status end)
  and (%(after_created_at)s::timestamptz is null
       or (d.created_at, d.id) < (%(after_created_at)s, %(after_id)s::uuid))
order by d.created_at desc, d.id desc
limit %(limit)s

-- name: digest_of_item
-- The digest that already holds an item (a duplicate delivery is answered with it).
select i.digest_id, d.action_id, d.item_count
from digest_items i join digests d on d.id = i.digest_id
where i.workspace_id = %(workspace_id)s and i.source = %(source)s
  and i.source_id = %(source_id)s and i.group_key = %(group_key)s
  and i.item_key = %(item_key)s
