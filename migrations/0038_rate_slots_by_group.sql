-- Rate limits at dispatch: a claimed wave takes its slots by groups of rows, not row by row.
-- A wave due at once, through one set of limits, is one group: its statement carries a few
-- numbers instead of an entry per row, loops once, and answers with one row.

-- The dispatcher's throttle for one claimed wave, in one statement. Scopes come sorted
-- (their rows are locked in that order, so concurrent waves cannot deadlock), each with its
-- limit and period. Rows come in the order they are to be sent, in groups of consecutive
-- rows that share their scopes and their window in each (the window, aligned to the epoch,
-- holding the later of now and the row's due time: the dispatcher computes it): a group is
-- its size and its (group, scope, window) entries, grouped by group (1-based ordinals).
--
-- The rules are those of a row at a time, taken a group at once: a row is admitted only if
-- every one of its scopes has room in its window, and then takes a slot in each; rows of a
-- group share their windows, so the first `room` of them (the least room among its scopes)
-- are admitted together, and once a scope is full every later row of the group is held. A
-- held row is given the start of the window where its place in line falls, at the scope
-- that holds it back the longest, one by one (only held rows are looped over). One answer
-- row per group: how many of its first rows are admitted, and for the others, in order,
-- the time each is due again and the scope (its ordinal) holding it. The counters are
-- written once per scope at the end.
create function tickwork_take_rate_slots(
    p_scopes text[], p_limits integer[], p_periods integer[],
    p_group_sizes integer[], p_entry_groups integer[], p_entry_scopes integer[],
    p_entry_windows timestamptz[]
) returns table (admitted integer, retry_ats timestamptz[], held_by integer[])
language plpgsql as $$
declare
    scope_count integer := coalesce(cardinality(p_scopes), 0);
    entry_count integer := coalesce(cardinality(p_entry_groups), 0);
    v_starts timestamptz[] := '{}';
    v_taken integer[] := '{}';
    v_deferred integer[] := '{}';
    s integer;
    k integer;
    e integer := 1;
    first_entry integer;
    w timestamptz;
    room integer;
    worst integer;
    later timestamptz;
    candidate timestamptz;
    passed numeric;
    r record;
begin
    insert into rate_windows (scope, window_start)
    select t.scope, 'epoch'::timestamptz
    from unnest(p_scopes) with ordinality as t(scope, o) order by t.o
    on conflict (scope) do nothing;
    for s in 1 .. scope_count loop
        select * into r from rate_windows where scope = p_scopes[s] for update;
        v_starts[s] := r.window_start; v_taken[s] := r.taken; v_deferred[s] := r.deferred;
    end loop;
    for g in 1 .. coalesce(cardinality(p_group_sizes), 0) loop
        first_entry := e;
        while e <= entry_count and p_entry_groups[e] = g loop
            e := e + 1;
        end loop;
        room := p_group_sizes[g];
        for k in first_entry .. e - 1 loop
            s := p_entry_scopes[k];
            w := p_entry_windows[k];
            if w > v_starts[s] then
                -- A later window: rows handed on to the windows passed are due by now.
                passed := extract(epoch from w - v_starts[s]) / p_periods[s];
                v_deferred[s] := greatest(0, v_deferred[s] - p_limits[s] * passed)::integer;
                v_starts[s] := w;
                v_taken[s] := 0;
            end if;
            room := least(room, greatest(0, p_limits[s] - v_taken[s]));
        end loop;
        for k in first_entry .. e - 1 loop
            s := p_entry_scopes[k];
            v_taken[s] := v_taken[s] + room;
        end loop;
        admitted := room; retry_ats := '{}'; held_by := '{}';
        for i in room + 1 .. p_group_sizes[g] loop
            later := null; worst := null;
            for k in first_entry .. e - 1 loop
                s := p_entry_scopes[k];
                if v_taken[s] >= p_limits[s] then
                    candidate := v_starts[s]
                        + make_interval(secs => p_periods[s] * (1 + v_deferred[s] / p_limits[s]));
                    if later is null or candidate > later then
                        later := candidate; worst := s;
                    end if;
                end if;
            end loop;
            v_deferred[worst] := v_deferred[worst] + 1;
            retry_ats := retry_ats || later; held_by := held_by || worst;
        end loop;
        return next;
    end loop;
    for s in 1 .. scope_count loop
        update rate_windows
        set window_start = v_starts[s], taken = v_taken[s], deferred = v_deferred[s],
            updated_at = now()
        where scope = p_scopes[s];
    end loop;
end;
$$;

-- tickwork_take_rate_tokens (0030), the same rules a row at a time, stays for the
-- dispatchers of the release before this one, which call it until a deploy replaces them.
