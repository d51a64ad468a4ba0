-- Receivers' bodies out of stored text. Before this, a webhook that was not delivered kept
-- "HTTP <status> from <scheme://host[:port]>: <an excerpt of the receiver's body>" in the
-- row's last_error and the ledger's excerpt, and from there in copies: the change log's
-- reason (a cancel copies last_error) and a recurring schedule's paused_reason. A body may
-- hold anything (secrets, internals) and members read all of these, so the excerpt is cut
-- off, leaving "HTTP <status> from <scheme://host[:port]>" and, when the dispatcher gave
-- up, its "(gave up after N attempts)". Webhook texts written from now on carry a fixed
-- phrase instead of the body (providers/webhook.py). Other providers' texts start with
-- their name ("Postmark HTTP 422 ...") and are left as they are.
--
-- One pass over each table; rows whose text changes are rewritten (their updated_at is
-- stamped, as for any change). Text already copied out of the database (logs, exports)
-- is not reached.
create function tickwork_without_receiver_body(message text) returns text
language sql immutable as $$
    select case
        when message ~ 'HTTP [0-9]{3} from [a-z][a-z0-9+.-]*://[^ ]+: '
        then regexp_replace(message, '(HTTP [0-9]{3} from [a-z][a-z0-9+.-]*://[^ ]+): .*$', '\1')
             || coalesce(substring(message from ' \(gave up after [0-9]+ attempts\)$'), '')
        else message
    end
$$;

update scheduled_actions
set last_error = tickwork_without_receiver_body(last_error)
where last_error ~ 'HTTP [0-9]{3} from [a-z][a-z0-9+.-]*://[^ ]+: ';

update action_attempts
set excerpt = tickwork_without_receiver_body(excerpt)
where excerpt ~ 'HTTP [0-9]{3} from [a-z][a-z0-9+.-]*://[^ ]+: ';

update action_changes
set reason = tickwork_without_receiver_body(reason)
where reason ~ 'HTTP [0-9]{3} from [a-z][a-z0-9+.-]*://[^ ]+: ';

update recurring_schedules
set paused_reason = tickwork_without_receiver_body(paused_reason)
where paused_reason ~ 'HTTP [0-9]{3} from [a-z][a-z0-9+.-]*://[^ ]+: ';

drop function tickwork_without_receiver_body(text);
