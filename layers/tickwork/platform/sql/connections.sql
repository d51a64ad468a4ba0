-- Queries over connections. Credentials are never here: secret_ref names them in the store.

-- name: insert_connection
insert into connections (id, workspace_id, name, provider, settings, secret_ref, created_by)
values (%(id)s, %(workspace_id)s, %(name)s, %(provider)s, %(settings)s, %(secret_ref)s,
        %(created_by)s)
returning *

-- name: get_connection
select * from connections
where id = %(id)s and workspace_id = %(workspace_id)s and status <> 'deleted'

-- name: list_connections
-- An event endpoint's connection (provider `event`) is listed as the endpoint it is
-- (/v1/event-endpoints), not here.
select * from connections
where workspace_id = %(workspace_id)s and status <> 'deleted' and provider <> 'event'
  and (%(provider)s::text is null or provider = %(provider)s)
order by created_at, id
limit %(limit)s

-- name: update_connection
-- Only the fields given change; a deleted connection is not updated.
update connections
set name = coalesce(%(name)s, name),
    settings = coalesce(%(settings)s, settings),
    status = coalesce(%(status)s, status),
    verified_at = case when %(reset_verification)s then null else verified_at end,
    verify_ok = case when %(reset_verification)s then null else verify_ok end,
    verify_message = case when %(reset_verification)s then null else verify_message end
where id = %(id)s and workspace_id = %(workspace_id)s and status <> 'deleted'
returning *

-- name: delete_connection
-- active|disabled -> deleted. The row stays, so actions naming it fail with a reason.
update connections
set status = 'deleted', deleted_at = now()
where id = %(id)s and workspace_id = %(workspace_id)s and status <> 'deleted'
returning *

-- name: record_verification
update connections
set verified_at = now(), verify_ok = %(ok)s, verify_message = %(message)s
where id = %(id)s and workspace_id = %(workspace_id)s and status <> 'deleted'
returning *

-- name: connection_for_schedule
-- Any status: a deleted or disabled connection is refused with its reason, not as absent.
select * from connections where id = %(id)s and workspace_id = %(workspace_id)s

-- name: connections_by_id
-- The dispatcher's look-up for a claimed batch: one statement, every status.
select * from connections where id = any(%(ids)s::uuid[])
