-- The delivery ledger: one row per provider call, written by the dispatcher's finalize in
-- the same statement as the outcome (a CTE), by the tick when it recovers a zombie as
-- `stuck`, and updated by the resolver when it settles an `ambiguous` or `stuck` attempt
-- with the provider's lookup. Only sanitized text is stored: codes, the provider's message
-- id and a short excerpt already cleaned of secrets; never a receiver's body.
--
-- Narrow and with one index (its key), so the hot path pays one heap and one index insert
-- per call, and no foreign key check (a trigger per row): only the finalize, the tick and
-- the resolver write it, each for a row it has just read or changed. Entries go with their
-- action (below) and with its workspace (whose delete cascades to the actions).
create table action_attempts (
    action_id            uuid not null,
    attempt              integer not null check (attempt > 0),
    workspace_id         uuid not null,
    started_at           timestamptz not null,
    finished_at          timestamptz,
    latency_ms           integer,
    -- What the call came to: delivered, rejected (refused for good), transient (provably not
    -- delivered), ambiguous (may have arrived), stuck (no outcome reached the row).
    outcome              text not null
                         check (outcome in ('delivered', 'rejected', 'transient', 'ambiguous',
                                            'stuck')),
    provider_code        text check (length(provider_code) <= 100),
    provider_message_id  text check (length(provider_message_id) <= 2000),
    excerpt              text check (length(excerpt) <= 300),
    -- What the resolver made of an ambiguous or stuck attempt: the provider has it
    -- (delivered: the row is published), it provably has not (requeued: one more attempt,
    -- at most once per action), or it could not tell (unresolved, with the reason).
    resolution           text check (resolution in ('delivered', 'requeued', 'unresolved')),
    resolved_at          timestamptz,
    resolution_detail    text check (length(resolution_detail) <= 300),
    primary key (action_id, attempt)
);

create function tickwork_delete_attempts() returns trigger
language plpgsql as $$
begin
    delete from action_attempts t using gone g where t.action_id = g.id;
    return null;
end;
$$;

-- Once per statement, and only for deletes: nothing on the hot path.
create trigger scheduled_actions_delete_attempts
    after delete on scheduled_actions
    referencing old table as gone
    for each statement
    execute function tickwork_delete_attempts();

-- The resolver's candidates: failed rows that may have arrived. Rare, so the partial index
-- is small and costs nothing for rows that publish.
-- By finished_at, and without naming status or submitted_at, which the claim writes: an
-- index naming them would end the claim's HOT updates (migration 0014). Only a failed row
-- is finished with one of these codes.
create index ix_scheduled_actions_unresolved on scheduled_actions (finished_at, id)
    where finished_at is not null and error_code in ('ambiguous', 'stuck');

grant select, insert, update on action_attempts to tickwork_api;
alter table action_attempts enable row level security;
create policy action_attempts_tenant on action_attempts to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());
