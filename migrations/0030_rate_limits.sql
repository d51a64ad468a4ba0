-- Rate limits: at most N sends a second, minute or hour per action type and per connection,
-- enforced at dispatch across every dispatcher; and at most N actions a window per key of a
-- rule (the excess dropped when the rule fires).

-- One row per limited scope (`type:<action type>:<per>`, `connection:<id>:<per>`): the
-- current window (aligned to the epoch: a minute starts at :00), the sends it admitted, and
-- how many rows it handed on to later windows. A row over the limit is given the window
-- after those handed on before it (its place in line), so a burst of 1,000 at 100 a minute
-- comes back 100 a window, not all 900 every window. Engine-only: no tenant reads it.
create table rate_windows (
    scope         text primary key check (length(scope) <= 200),
    window_start  timestamptz not null,
    taken         integer not null default 0 check (taken >= 0),
    deferred      integer not null default 0 check (deferred >= 0),
    updated_at    timestamptz not null default now()
);

-- The dispatcher's throttle for one claimed wave, in one statement. Scopes come sorted
-- (their rows are locked in that order, so concurrent waves cannot deadlock), each with its
-- limit and period; rows come in the order they are to be sent, with the (row, scope)
-- pairs that apply to each, grouped by row (1-based ordinals), and the window of the scope
-- the row is sent in (the window, aligned to the epoch, holding the later of now and its
-- due time: the dispatcher computes it, so the loop evaluates no function per row). A
-- row is admitted only if every one of its scopes has room in its window, and then takes a
-- slot in each; otherwise it is given the start of the window where its place in line
-- falls, at the scope that holds it back the longest. The counters are written once per scope at the end.
create function tickwork_take_rate_tokens(
    p_scopes text[], p_limits integer[], p_periods integer[],
    p_ids uuid[], p_entry_rows integer[], p_entry_scopes integer[],
    p_entry_windows timestamptz[]
) returns table (action_id uuid, admitted boolean, retry_at timestamptz, held_by text)
language plpgsql as $$
declare
    scope_count integer := coalesce(cardinality(p_scopes), 0);
    entry_count integer := coalesce(cardinality(p_entry_rows), 0);
    v_starts timestamptz[] := '{}';
    v_taken integer[] := '{}';
    v_deferred integer[] := '{}';
    s integer;
    k integer;
    e integer := 1;
    first_entry integer;
    w timestamptz;
    fits boolean;
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
    for i in 1 .. coalesce(cardinality(p_ids), 0) loop
        first_entry := e;
        while e <= entry_count and p_entry_rows[e] = i loop
            e := e + 1;
        end loop;
        fits := true;
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
            if v_taken[s] >= p_limits[s] then
                fits := false;
            end if;
        end loop;
        action_id := p_ids[i];
        if fits then
            for k in first_entry .. e - 1 loop
                s := p_entry_scopes[k];
                v_taken[s] := v_taken[s] + 1;
            end loop;
            admitted := true; retry_at := null; held_by := null;
        else
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
            admitted := false; retry_at := later; held_by := p_scopes[worst];
        end if;
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

-- A throttled row's entry in its change log: held back by a limit, with the limit and the
-- time it is due again.
alter table action_changes drop constraint action_changes_kind_check;
alter table action_changes add constraint action_changes_kind_check
    check (kind in ('cancel', 'reschedule', 'defer', 'quiet_hours', 'skip', 'drop', 'exit',
                    'digest', 'flush', 'throttled'));

-- A rule's per-key limit: {"key": template, "count": N, "per_seconds": W, "excess": "drop"}.
alter table rules add column rate_limit jsonb
    constraint rules_rate_limit_object check (rate_limit is null
                                              or jsonb_typeof(rate_limit) = 'object');

-- A rule's keys: the window that began with the first action a key was given (it lasts
-- `per_seconds`) and how many the key was given in it. Taken in the transaction that
-- writes the action, so a firing that writes nothing takes nothing.
create table rule_key_windows (
    rule_id       uuid not null references rules (id) on delete cascade,
    key           text not null check (length(key) <= 500),
    workspace_id  uuid not null references workspaces (id) on delete cascade,
    window_start  timestamptz not null,
    window_end    timestamptz not null,
    taken         integer not null check (taken >= 1),
    primary key (rule_id, key)
);

-- Ended windows of a rule go a few at a time, as its keys are taken.
create index ix_rule_key_windows_end on rule_key_windows (rule_id, window_end);

grant select, insert, update, delete on rule_key_windows to tickwork_api;
alter table rule_key_windows enable row level security;
create policy rule_key_windows_tenant on rule_key_windows to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());
