-- Sequences (drip campaigns), recipients with their policies (quiet hours, frequency
-- caps), and the change log. Drip steps and messages to recipients are ordinary
-- scheduled_actions rows; these tables are the producers' and the policies' own.

-- ------------------------------------------------------------------ scheduled_actions

-- Who a message is for (a recipient's id in the workspace; their zone and policies apply),
-- whether it is exempt from them (transactional: a receipt, a password reset), and the time
-- it was asked for when quiet hours moved it at creation.
alter table scheduled_actions
    add column recipient_id text check (length(recipient_id) between 1 and 200),
    add column transactional boolean not null default false,
    add column original_publish_at timestamptz;

-- A rule's action may be addressed to a recipient (a template, such as
-- "{{ context.guest.id }}"), and marked transactional.
alter table rules
    add column recipient_template text check (length(recipient_template) between 1 and 2000),
    add column transactional boolean not null default false;

-- --------------------------------------------------------------------------- recipients

create table recipients (
    workspace_id  uuid not null references workspaces (id) on delete cascade,
    recipient_id  text not null check (length(recipient_id) between 1 and 200),
    timezone      text not null,
    -- Weekly windows in the recipient's zone: [{"days": ["mon", ...], "start": "21:00",
    -- "end": "08:00"}]; a window whose end is not after its start runs past midnight.
    quiet_hours   jsonb not null default '[]'::jsonb check (jsonb_typeof(quiet_hours) = 'array'),
    -- Messages per channel (action type) per calendar day in the recipient's zone.
    caps          jsonb not null default '{}'::jsonb check (jsonb_typeof(caps) = 'object'),
    -- What happens to a message over its cap: deferred to the next allowed slot, or dropped.
    cap_policy    text not null default 'defer' check (cap_policy in ('defer', 'drop')),
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now(),
    primary key (workspace_id, recipient_id)
);

create trigger recipients_timezone_valid
    before insert or update of timezone on recipients
    for each row execute function tickwork_check_timezone();
create trigger recipients_touch
    before update on recipients
    for each row execute function tickwork_touch_updated_at();

-- One row per (recipient, channel, local day) with a cap: updated conditionally in the
-- claim's transaction, so two dispatchers cannot both take the last slot.
create table recipient_day_counts (
    workspace_id  uuid not null,
    recipient_id  text not null,
    channel       text not null,
    day           date not null,
    sent          integer not null check (sent >= 0),
    primary key (workspace_id, recipient_id, channel, day),
    foreign key (workspace_id, recipient_id)
        references recipients (workspace_id, recipient_id) on delete cascade
);

-- Which action holds which slot: a claim of the same action again (after a transient
-- error) keeps its slot instead of taking a second.
create table recipient_cap_slots (
    action_id     uuid primary key references scheduled_actions (id) on delete cascade,
    workspace_id  uuid not null,
    recipient_id  text not null,
    channel       text not null,
    day           date not null
);

-- Take a slot for each (action, channel, day) of a claimed batch, or say it is full.
-- Counter rows are locked in a fixed order, so concurrent batches cannot deadlock.
create function tickwork_take_cap_slots(
    p_workspace_ids uuid[], p_action_ids uuid[], p_recipients text[], p_channels text[],
    p_days date[], p_caps integer[]
) returns table (action_id uuid, admitted boolean)
language plpgsql as $$
declare
    r record;
    taken integer;
begin
    for r in
        select * from unnest(p_workspace_ids, p_action_ids, p_recipients, p_channels, p_days,
                             p_caps) as t(ws, id, recipient, channel, day, cap)
        order by ws, recipient, channel, day, id
    loop
        if exists (select 1 from recipient_cap_slots s where s.action_id = r.id) then
            action_id := r.id; admitted := true; return next; continue;
        end if;
        taken := null;
        insert into recipient_day_counts as c (workspace_id, recipient_id, channel, day, sent)
        select r.ws, r.recipient, r.channel, r.day, 1 where r.cap > 0
        on conflict (workspace_id, recipient_id, channel, day)
            do update set sent = c.sent + 1 where c.sent < r.cap
        returning c.sent into taken;
        if taken is not null then
            insert into recipient_cap_slots values (r.id, r.ws, r.recipient, r.channel, r.day);
        end if;
        action_id := r.id; admitted := taken is not null; return next;
    end loop;
end;
$$;

-- --------------------------------------------------------------------------- campaigns

create table campaigns (
    id            uuid primary key default gen_random_uuid(),
    workspace_id  uuid not null references workspaces (id) on delete cascade,
    name          text not null check (length(name) between 1 and 200),
    -- Ordered steps: [{"wait": {...}, "action": {...}, "conditions": [...]}] (fixed once made).
    steps         jsonb not null check (jsonb_typeof(steps) = 'array' and jsonb_array_length(steps) between 1 and 50),
    -- Event types that end a recipient's enrollment (reply, unsubscribe, a goal).
    exit_events   text[] not null default '{}',
    -- Overrides the recipient's cap policy for this campaign's messages.
    cap_policy    text check (cap_policy in ('defer', 'drop')),
    created_by    text,
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now()
);

create trigger campaigns_touch
    before update on campaigns
    for each row execute function tickwork_touch_updated_at();
create index ix_campaigns_workspace on campaigns (workspace_id, created_at, id);

create table enrollments (
    id                 uuid primary key default gen_random_uuid(),
    workspace_id       uuid not null references workspaces (id) on delete cascade,
    campaign_id        uuid not null references campaigns (id) on delete cascade,
    recipient_id       text not null,
    -- The app's data about this enrollment: what templates and fire-time conditions read.
    data               jsonb not null default '{}'::jsonb
                       constraint enrollments_data_object check (jsonb_typeof(data) = 'object')
                       constraint enrollments_data_size check (octet_length(data::text) <= 65536),
    -- The step whose action is pending (or in flight); the number of steps when completed.
    current_step       integer not null default 0 check (current_step >= 0),
    current_action_id  uuid references scheduled_actions (id),
    next_send_at       timestamptz,
    status             text not null default 'active'
                       check (status in ('active', 'completed', 'exited')),
    exit_reason        text,
    -- What became of the pending step at the exit: cancelled, or already in flight.
    exit_outcome       text check (exit_outcome in ('cancelled', 'in_flight', 'none')),
    last_error         text,
    starts_at          timestamptz not null,
    enrolled_at        timestamptz not null default now(),
    completed_at       timestamptz,
    exited_at          timestamptz,
    updated_at         timestamptz not null default now(),
    unique (campaign_id, recipient_id),
    foreign key (workspace_id, recipient_id)
        references recipients (workspace_id, recipient_id)
);

create trigger enrollments_touch
    before update on enrollments
    for each row execute function tickwork_touch_updated_at();
create index ix_enrollments_action on enrollments (current_action_id)
    where current_action_id is not null;
create index ix_enrollments_recipient on enrollments (workspace_id, recipient_id)
    where status = 'active';

-- Which enrollment and step made which action (its dedupe key is `enrollment:step`; a step
-- a person moved has its replacement here too).
create table enrollment_actions (
    action_id      uuid primary key references scheduled_actions (id) on delete cascade,
    workspace_id   uuid not null references workspaces (id) on delete cascade,
    enrollment_id  uuid not null references enrollments (id) on delete cascade,
    step_index     integer not null,
    -- Set by a trigger when the action was published or cancelled (sent, skipped at fire
    -- time, dropped, cancelled by a person); `advanced` once the advance pass saw it.
    done_at        timestamptz,
    advanced       boolean not null default false
);

create index ix_enrollment_actions_enrollment on enrollment_actions (enrollment_id, step_index);
-- The advance pass's way in.
create index ix_enrollment_actions_ready on enrollment_actions (done_at)
    where done_at is not null and not advanced;

-- A step's action published or cancelled: its enrollment is ready for the next step. The
-- trigger touches only this ledger row (never the enrollment, which exits lock before the
-- action: no lock cycle with the dispatcher's finalize). Rows of other sources pay only the
-- WHEN test; the dispatcher runs no extra statement.
create function tickwork_enrollment_step_done() returns trigger
language plpgsql as $$
begin
    update enrollment_actions set done_at = now()
    where action_id = new.id and done_at is null;
    return null;
end;
$$;

create trigger scheduled_actions_enrollment_step_done
    after update of status on scheduled_actions
    for each row
    when (new.source = 'sequence' and new.status in ('published', 'cancelled')
          and old.status is distinct from new.status)
    execute function tickwork_enrollment_step_done();

-- ------------------------------------------------------------------------- change log

-- Every cancel, reschedule, defer, quiet-hours move, skip, drop and exit: who or what, why,
-- the old and new time.
create table action_changes (
    id             bigint generated always as identity primary key,
    workspace_id   uuid not null references workspaces (id) on delete cascade,
    action_id      uuid references scheduled_actions (id) on delete cascade,
    enrollment_id  uuid references enrollments (id) on delete cascade,
    kind           text not null check (kind in ('cancel', 'reschedule', 'defer', 'quiet_hours',
                                                  'skip', 'drop', 'exit')),
    actor          text not null,
    reason         text,
    old_at         timestamptz,
    new_at         timestamptz,
    new_action_id  uuid,
    created_at     timestamptz not null default now()
);

create index ix_action_changes_action on action_changes (action_id, id) where action_id is not null;
create index ix_action_changes_workspace on action_changes (workspace_id, id);

-- Who acts: the API sets tickwork.actor to the caller for its transaction; workers are the
-- system, named by the kind of row.
create function tickwork_actor(source text) returns text
language sql stable as $$
    select coalesce(nullif(current_setting('tickwork.actor', true), ''), 'system:' || source)
$$;

create function tickwork_log_cancel() returns trigger
language plpgsql as $$
begin
    insert into action_changes (workspace_id, action_id, enrollment_id, kind, actor, reason,
                                old_at)
    values (new.workspace_id, new.id,
            case when new.source = 'sequence' then
                (select enrollment_id from enrollment_actions where action_id = new.id) end,
            case new.error_code when 'exited' then 'exit' when 'skipped' then 'skip'
                                when 'capped' then 'drop' else 'cancel' end,
            tickwork_actor(new.source), coalesce(new.last_error, new.error_code),
            coalesce(old.next_attempt_at, old.publish_at));
    return null;
end;
$$;

create trigger scheduled_actions_log_cancel
    after update of status on scheduled_actions
    for each row
    when (new.status = 'cancelled' and old.status is distinct from new.status)
    execute function tickwork_log_cancel();

-- A replacement row (reschedule = cancel + insert) turns its predecessor's cancel entry into
-- a reschedule with the new time; a row quiet hours moved records the move.
create function tickwork_log_insert() returns trigger
language plpgsql as $$
begin
    if new.rescheduled_from is not null then
        update action_changes
        set kind = 'reschedule', new_at = new.publish_at, new_action_id = new.id
        where id = (select max(id) from action_changes
                    where action_id = new.rescheduled_from and kind = 'cancel');
    end if;
    if new.original_publish_at is not null and new.original_publish_at <> new.publish_at then
        insert into action_changes (workspace_id, action_id, kind, actor, reason, old_at, new_at)
        values (new.workspace_id, new.id, 'quiet_hours', tickwork_actor(new.source),
                'in the recipient''s quiet hours', new.original_publish_at, new.publish_at);
    end if;
    return null;
end;
$$;

create trigger scheduled_actions_log_insert
    after insert on scheduled_actions
    for each row
    when (new.rescheduled_from is not null or new.original_publish_at is not null)
    execute function tickwork_log_insert();

-- ------------------------------------------------------------------ row-level security

grant select, insert, update, delete on recipients to tickwork_api;
alter table recipients enable row level security;
create policy recipients_tenant on recipients to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select on recipient_day_counts to tickwork_api;
alter table recipient_day_counts enable row level security;
create policy recipient_day_counts_tenant on recipient_day_counts to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select on recipient_cap_slots to tickwork_api;
alter table recipient_cap_slots enable row level security;
create policy recipient_cap_slots_tenant on recipient_cap_slots to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select, insert, update on campaigns to tickwork_api;
alter table campaigns enable row level security;
create policy campaigns_tenant on campaigns to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select, insert, update on enrollments to tickwork_api;
alter table enrollments enable row level security;
create policy enrollments_tenant on enrollments to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select, insert, update on enrollment_actions to tickwork_api;
alter table enrollment_actions enable row level security;
create policy enrollment_actions_tenant on enrollment_actions to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());

grant select, insert, update on action_changes to tickwork_api;
alter table action_changes enable row level security;
create policy action_changes_tenant on action_changes to tickwork_api
    using (workspace_id = tickwork_current_workspace())
    with check (workspace_id = tickwork_current_workspace());
