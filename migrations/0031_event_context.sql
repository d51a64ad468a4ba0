-- Events carry the stored context: a rule names the stored entities its templates read
-- (`load`: name → {entity_type, id template}), loaded as of the event and kept in the
-- snapshot of the action it makes (rule_actions.context). Checked by the domain when the
-- rule is written (tickwork.rules.loads); the table keeps its shape and size bounded.
alter table rules
    add column load jsonb not null default '{}'::jsonb
        constraint rules_load_object check (jsonb_typeof(load) = 'object')
        constraint rules_load_size check (octet_length(load::text) <= 16384);
