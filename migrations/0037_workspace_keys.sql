-- The schema ready for workspace_id as a distribution key (docs/scaling.md): every unique
-- key and every foreign key of a workspace-owned table names workspace_id, so each holds
-- within one workspace, and a distributed Postgres (Citus) that places a workspace's rows
-- on one node can keep them. tests/integration/test_workspace_keys.py reads the catalog and
-- fails on a key that does not, but for the few global by design it lists.
--
-- The primary keys on a surrogate id (a uuid from gen_random_uuid(), or an identity) stay:
-- the queues' messages, callbacks and the API find rows by id alone, and replacing
-- scheduled_actions_pkey would rebuild the hottest index of all. A parent that a composite
-- foreign key names gets a unique (workspace_id, id) beside it instead. Natural keys gain
-- workspace_id as their last column, so every lookup that used their leading columns still
-- does.
--
-- Each new index is created `if not exists` under the name it keeps: on a large database an
-- operator builds them first with `create unique index concurrently` (docs/scaling.md
-- lists the statements), and this migration then only swaps the constraints.

-- ---------------------------------------------------------------- parents: (workspace_id, id)

create unique index if not exists ux_scheduled_actions_workspace_id
    on scheduled_actions (workspace_id, id);
create unique index if not exists ux_connections_workspace_id on connections (workspace_id, id);
create unique index if not exists ux_recurring_schedules_workspace_id
    on recurring_schedules (workspace_id, id);
create unique index if not exists ux_rules_workspace_id on rules (workspace_id, id);
create unique index if not exists ux_campaigns_workspace_id on campaigns (workspace_id, id);
create unique index if not exists ux_enrollments_workspace_id on enrollments (workspace_id, id);
create unique index if not exists ux_digests_workspace_id on digests (workspace_id, id);

-- ---------------------------------------------------------------- natural keys + workspace_id

-- Each primary key is rebuilt as the index below, then swapped in under its old name.
create unique index if not exists action_attempts_pkey_ws
    on action_attempts (action_id, attempt, workspace_id);
alter table action_attempts
    drop constraint action_attempts_pkey,
    add constraint action_attempts_pkey primary key using index action_attempts_pkey_ws;

create unique index if not exists callback_receipts_pkey_ws
    on callback_receipts (connection_id, event_key, workspace_id);
alter table callback_receipts
    drop constraint callback_receipts_pkey,
    add constraint callback_receipts_pkey primary key using index callback_receipts_pkey_ws;

create unique index if not exists callback_counts_pkey_ws
    on callback_counts (connection_id, outcome, shard, workspace_id);
alter table callback_counts
    drop constraint callback_counts_pkey,
    add constraint callback_counts_pkey primary key using index callback_counts_pkey_ws;

create unique index if not exists rule_actions_pkey_ws on rule_actions (action_id, workspace_id);
alter table rule_actions
    drop constraint rule_actions_pkey,
    add constraint rule_actions_pkey primary key using index rule_actions_pkey_ws;

create unique index if not exists recipient_cap_slots_pkey_ws
    on recipient_cap_slots (action_id, workspace_id);
alter table recipient_cap_slots
    drop constraint recipient_cap_slots_pkey,
    add constraint recipient_cap_slots_pkey primary key using index recipient_cap_slots_pkey_ws;

create unique index if not exists enrollment_actions_pkey_ws
    on enrollment_actions (action_id, workspace_id);
alter table enrollment_actions
    drop constraint enrollment_actions_pkey,
    add constraint enrollment_actions_pkey primary key using index enrollment_actions_pkey_ws;

create unique index if not exists rule_key_windows_pkey_ws
    on rule_key_windows (rule_id, key, workspace_id);
alter table rule_key_windows
    drop constraint rule_key_windows_pkey,
    add constraint rule_key_windows_pkey primary key using index rule_key_windows_pkey_ws;

create unique index if not exists ux_enrollments_campaign_recipient
    on enrollments (campaign_id, recipient_id, workspace_id);
alter table enrollments
    drop constraint enrollments_campaign_id_recipient_id_key,
    add constraint ux_enrollments_campaign_recipient
        unique using index ux_enrollments_campaign_recipient;

create unique index if not exists ux_digest_items_position
    on digest_items (digest_id, position, workspace_id);
alter table digest_items
    drop constraint digest_items_digest_id_position_key,
    add constraint ux_digest_items_position unique using index ux_digest_items_position;

-- The expander's one row per (schedule, occurrence), as in migration 0023 with workspace_id
-- last; insert_occurrences' ON CONFLICT names the same columns.
create unique index if not exists ux_scheduled_actions_occurrence on scheduled_actions
    (recurring_schedule_id, (coalesce(original_publish_at, publish_at)), workspace_id)
    where recurring_schedule_id is not null and source = 'recurring' and not cancelled;
drop index ux_scheduled_actions_recurring_occurrence;

-- ---------------------------------------------------------------- foreign keys, both sides

-- Same names, same actions on delete; a null reference is not checked (MATCH SIMPLE), as
-- before. digests.action_id still goes null alone when its action is removed.
alter table scheduled_actions
    drop constraint scheduled_actions_connection_id_fkey,
    add constraint scheduled_actions_connection_id_fkey
        foreign key (workspace_id, connection_id) references connections (workspace_id, id),
    drop constraint scheduled_actions_recurring_schedule_fk,
    add constraint scheduled_actions_recurring_schedule_fk
        foreign key (workspace_id, recurring_schedule_id)
        references recurring_schedules (workspace_id, id),
    drop constraint scheduled_actions_rescheduled_from_fkey,
    add constraint scheduled_actions_rescheduled_from_fkey
        foreign key (workspace_id, rescheduled_from) references scheduled_actions (workspace_id, id);

alter table recurring_schedules
    drop constraint recurring_schedules_connection_id_fkey,
    add constraint recurring_schedules_connection_id_fkey
        foreign key (workspace_id, connection_id) references connections (workspace_id, id);

alter table rule_actions
    drop constraint rule_actions_action_id_fkey,
    add constraint rule_actions_action_id_fkey
        foreign key (workspace_id, action_id) references scheduled_actions (workspace_id, id)
        on delete cascade,
    drop constraint rule_actions_rule_id_fkey,
    add constraint rule_actions_rule_id_fkey
        foreign key (workspace_id, rule_id) references rules (workspace_id, id);

alter table rule_key_windows
    drop constraint rule_key_windows_rule_id_fkey,
    add constraint rule_key_windows_rule_id_fkey
        foreign key (workspace_id, rule_id) references rules (workspace_id, id) on delete cascade;

alter table recipient_cap_slots
    drop constraint recipient_cap_slots_action_id_fkey,
    add constraint recipient_cap_slots_action_id_fkey
        foreign key (workspace_id, action_id) references scheduled_actions (workspace_id, id)
        on delete cascade;

alter table enrollments
    drop constraint enrollments_campaign_id_fkey,
    add constraint enrollments_campaign_id_fkey
        foreign key (workspace_id, campaign_id) references campaigns (workspace_id, id)
        on delete cascade,
    drop constraint enrollments_current_action_id_fkey,
    add constraint enrollments_current_action_id_fkey
        foreign key (workspace_id, current_action_id)
        references scheduled_actions (workspace_id, id);

alter table enrollment_actions
    drop constraint enrollment_actions_action_id_fkey,
    add constraint enrollment_actions_action_id_fkey
        foreign key (workspace_id, action_id) references scheduled_actions (workspace_id, id)
        on delete cascade,
    drop constraint enrollment_actions_enrollment_id_fkey,
    add constraint enrollment_actions_enrollment_id_fkey
        foreign key (workspace_id, enrollment_id) references enrollments (workspace_id, id)
        on delete cascade;

alter table action_changes
    drop constraint action_changes_action_id_fkey,
    add constraint action_changes_action_id_fkey
        foreign key (workspace_id, action_id) references scheduled_actions (workspace_id, id)
        on delete cascade,
    drop constraint action_changes_enrollment_id_fkey,
    add constraint action_changes_enrollment_id_fkey
        foreign key (workspace_id, enrollment_id) references enrollments (workspace_id, id)
        on delete cascade;

alter table callback_receipts
    drop constraint callback_receipts_connection_id_fkey,
    add constraint callback_receipts_connection_id_fkey
        foreign key (workspace_id, connection_id) references connections (workspace_id, id)
        on delete cascade;

alter table callback_counts
    drop constraint callback_counts_connection_id_fkey,
    add constraint callback_counts_connection_id_fkey
        foreign key (workspace_id, connection_id) references connections (workspace_id, id)
        on delete cascade;

alter table event_endpoints
    drop constraint event_endpoints_connection_id_fkey,
    add constraint event_endpoints_connection_id_fkey
        foreign key (workspace_id, connection_id) references connections (workspace_id, id);

alter table digests
    drop constraint digests_action_id_fkey,
    add constraint digests_action_id_fkey
        foreign key (workspace_id, action_id) references scheduled_actions (workspace_id, id)
        on delete set null (action_id);

alter table digest_items
    drop constraint digest_items_digest_id_fkey,
    add constraint digest_items_digest_id_fkey
        foreign key (workspace_id, digest_id) references digests (workspace_id, id)
        on delete cascade;
