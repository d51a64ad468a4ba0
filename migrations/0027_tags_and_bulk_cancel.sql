-- Tags, and cancelling everything pending of one parent (issue #37, point 6).
--
-- An action (and a recurring schedule, whose occurrences copy them) carries a few labels of
-- the tenant's own ("podcast:42", "campaign-spring"), so one call can cancel every pending
-- action of a podcast. The bulk cancel takes a parent (a thing, an entity, a recipient, a
-- campaign, a tag) and walks only its pending rows, along the indexes below.

-- The rule tickwork.actions.model.check_tags applies before a row is written (at most 10,
-- each 1-64 characters of letters, digits and _ . : / @ = -, starting with a letter or
-- digit); the table refuses anything else whatever wrote it.
create function tickwork_tags_valid(tags text[]) returns boolean
    language sql immutable parallel safe
as $$
    select cardinality(tags) <= 10
       and coalesce(bool_and(t ~ '^[A-Za-z0-9][A-Za-z0-9_.:/@=-]{0,63}$'), true)
    from unnest(tags) as t
$$;

-- Constant defaults: no table rewrite, existing rows read as untagged.
alter table scheduled_actions
    add column tags text[] not null default '{}'
        constraint scheduled_actions_tags_check check (tickwork_tags_valid(tags));
alter table recurring_schedules
    add column tags text[] not null default '{}'
        constraint recurring_schedules_tags_check check (tickwork_tags_valid(tags));

-- The pending rows of each parent. Partial on `finished_at is null` (queued, or claimed and
-- in flight): a cancel or publish sets finished_at, so its new version leaves them, and
-- they hold what a bulk cancel can still take (its statements also check `queued`). Not on
-- `status`: the claim (queued -> submitted) writes status, and an index naming it, even in
-- its predicate, would end the claim's HOT update (see 0014 and 0017). Each predicate
-- also names its column (`recipient_id is not null`, a non-empty tag list), which the
-- tick's cross-workspace due query does not imply, so the tick keeps to its due index. A
-- thing's pending rows are found by ux_scheduled_actions_active_thing_target and
-- ix_scheduled_actions_thing already.
create index ix_scheduled_actions_pending_tags on scheduled_actions using gin (tags)
    where finished_at is null and cardinality(tags) > 0;
create index ix_scheduled_actions_pending_recipient on scheduled_actions
    (workspace_id, recipient_id)
    where finished_at is null and recipient_id is not null;

-- A campaign's enrollments still running (a bulk cancel by campaign exits them); the
-- unique (campaign_id, recipient_id) index would read the exited and completed ones too.
create index ix_enrollments_active_campaign on enrollments (campaign_id)
    where status = 'active';
-- An entity's actions are found through rule_actions (workspace_id, entity_type,
-- entity_id): ix_rule_actions_entity serves, then the primary key.
