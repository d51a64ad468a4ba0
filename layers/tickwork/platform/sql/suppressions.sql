-- Suppression list (migration 0022).

-- name: suppress_address
-- Adds an address; one already suppressed keeps its first reason and source (the first
-- cause is the one a person needs to see), and the answer says whether it was new.
insert into suppressions (workspace_id, channel, address, scope, reason, source, detail)
values (%(workspace_id)s, %(channel)s, %(address)s, %(scope)s, %(reason)s, %(source)s,
        %(detail)s)
on conflict (workspace_id, channel, address, scope) do nothing
returning created_at

-- name: get_suppression
select * from suppressions
where workspace_id = %(workspace_id)s and channel = %(channel)s and address = %(address)s
  and scope = %(scope)s
