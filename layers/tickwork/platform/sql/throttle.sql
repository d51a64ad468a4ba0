-- Rate limits (migration 0030): per action type and connection at dispatch, per key of a
-- rule when it fires.

-- name: take_rate_slots
-- One claimed wave's slots in its scopes' windows, by groups of rows sharing their scopes
-- and windows, one statement (see the function, migration 0038).
select admitted, retry_ats, held_by from tickwork_take_rate_slots(
    %(scopes)s::text[], %(limits)s::int[], %(periods)s::int[], %(group_sizes)s::int[],
    %(entry_groups)s::int[], %(entry_scopes)s::int[], %(entry_windows)s::timestamptz[])

-- name: log_throttled
-- Rows a limit held back (handed back queued, never sent), in their change log: the limit
-- and the time they are due again.
insert into action_changes (workspace_id, action_id, kind, actor, reason, old_at, new_at)
select a.workspace_id, a.id, 'throttled', 'system:throttle', f.reason, f.old_at, f.new_at
from unnest(%(ids)s::uuid[], %(reasons)s::text[], %(old_ats)s::timestamptz[],
            %(new_ats)s::timestamptz[]) as f(id, reason, old_at, new_at)
join scheduled_actions a on a.id = f.id

-- name: take_rule_key
-- One action for a rule's key, if the key's window has room: a window begins with the
-- first action given in it and lasts per_seconds; an ended one starts again. No row back:
-- the key is at its limit. A few ended windows of the rule go first (its index).
with ended as (
    delete from rule_key_windows
    where ctid = any(array(
        select ctid from rule_key_windows
        where rule_id = %(rule_id)s and window_end <= %(now)s and key <> %(key)s
        order by window_end
        limit 20))
)
insert into rule_key_windows as w (rule_id, key, workspace_id, window_start, window_end, taken)
values (%(rule_id)s, %(key)s, %(workspace_id)s, %(now)s,
        %(now)s + make_interval(secs => %(per_seconds)s), 1)
on conflict (rule_id, key, workspace_id) do update
set window_start = case when w.window_end <= %(now)s then %(now)s else w.window_start end,
    window_end = case when w.window_end <= %(now)s
                      then %(now)s + make_interval(secs => %(per_seconds)s)
                      else w.window_end end,
    taken = case when w.window_end <= %(now)s then 1 else w.taken + 1 end
where w.window_end <= %(now)s or w.taken < %(count)s
returning w.taken

-- name: take_shared_key
-- The same for a key shared by the workspace's rules and drip steps (migration 0035): one
-- window per (workspace, key), begun by the first action given in it and lasting the
-- per_seconds of the limit that began it; each limit compares what was taken with its own
-- count.
with ended as (
    delete from key_windows
    where ctid = any(array(
        select ctid from key_windows
        where workspace_id = %(workspace_id)s and window_end <= %(now)s and key <> %(key)s
        order by window_end
        limit 20))
)
insert into key_windows as w (workspace_id, key, window_start, window_end, taken)
values (%(workspace_id)s, %(key)s, %(now)s, %(now)s + make_interval(secs => %(per_seconds)s), 1)
on conflict (workspace_id, key) do update
set window_start = case when w.window_end <= %(now)s then %(now)s else w.window_start end,
    window_end = case when w.window_end <= %(now)s
                      then %(now)s + make_interval(secs => %(per_seconds)s)
                      else w.window_end end,
    taken = case when w.window_end <= %(now)s then 1 else w.taken + 1 end
where w.window_end <= %(now)s or w.taken < %(count)s
returning w.taken
