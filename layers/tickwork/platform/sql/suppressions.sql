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

-- name: list_suppressions
-- A page of the workspace's list, newest first, along ix_suppressions_created; the cursor
-- is the last entry of the previous page.
select * from suppressions
where workspace_id = %(workspace_id)s
  and (%(channel)s::text is null or channel = %(channel)s::text)
  and (%(reason)s::text is null or reason = %(reason)s::text)
  and (%(after_at)s::timestamptz is null
       or created_at < %(after_at)s::timestamptz
       or created_at = %(after_at)s::timestamptz
          and (channel, address, scope) > (%(after_channel)s::text, %(after_address)s::text,
                                           %(after_scope)s::text))
order by created_at desc, channel, address, scope
limit %(limit)s

-- name: remove_suppression
-- Removes one entry; a complaint only when the caller may (an admin). The second branch
-- reports an entry that stayed (so a refusal can be told from an absence).
with removed as (
    delete from suppressions
    where workspace_id = %(workspace_id)s and channel = %(channel)s and address = %(address)s
      and scope = %(scope)s and (reason <> 'complaint' or %(may_remove_complaint)s)
    returning *
)
select true as removed, removed.* from removed
union all
select false as removed, s.* from suppressions s
where s.workspace_id = %(workspace_id)s and s.channel = %(channel)s
  and s.address = %(address)s and s.scope = %(scope)s
  and not exists (select 1 from removed)
