-- Suppression at claim: the dispatcher's claim (claim_actions) reads the addresses a
-- message is sent to from its payload and looks them up in `suppressions` by its primary
-- key, in the claim's own statement. A suppressed row is cancelled there (`suppressed`),
-- never handed to a provider; the other rows are claimed as before.
--
-- The functions below are the SQL twins of tickwork.suppression.model (normalize_address,
-- mask_address); tests/integration/test_suppression_claim.py checks that both agree on a
-- table of addresses.

-- The stored spelling of an address, as normalize_address gives it, or null when it is
-- not an address of the channel (nothing on the list can then match it).
--
-- email: Python's email.utils.parseaddr reads the first mailbox and normalize_address
-- lowercases its addr-spec. For the forms a payload may hold (providers.schema.mailbox:
-- `addr`, `Name <addr>`, `"Name" <addr>`, `<addr>`), that is: comments `(...)` dropped,
-- the part inside the angle brackets when there are any, else the whole, trimmed; a
-- spec with a character parseaddr stops at (`,;:[]"`, a space) outside a quoted local part
-- reads as no address.
-- sms: E.164 once spaces, dots, dashes and brackets are removed.
create function tickwork_normalize_address(channel text, address text) returns text
language plpgsql immutable strict parallel safe as $$
declare
    v     text;
    spec  text;
begin
    if channel = 'sms' then
        if address ~ '^\+[1-9][0-9]{6,14}$' then
            return address;  -- the common case, as Twilio's payload schema holds it
        end if;
        v := regexp_replace(address, '[\s().-]', '', 'g');
        return case when v ~ '^\+[1-9][0-9]{6,14}$' then v end;
    end if;
    if channel <> 'email' then
        return null;
    end if;
    -- The common cases first, one expression each: `addr` and `Name <addr>` with nothing
    -- parseaddr reads specially (quotes, comments, separators, spaces in the address).
    spec := substring(address from
        '^\s*(?:[^<>@"()\[\]\\,;:]*<\s*)?([^\s<>@"()\[\]\\,;:]+@[^\s<>@"()\[\]\\,;:]+)\s*>?\s*$');
    if spec is not null and (position('<' in address) > 0 or position('>' in address) = 0) then
        return lower(spec);
    end if;
    v := btrim(regexp_replace(address, '\([^()]*\)', '', 'g'), E' \t\r\n\f\v');
    -- A quoted local part ("a b"@example.com) is kept whole, quotes and all.
    spec := substring(v from '(?:^|<)\s*("[^"\\]*"@[^<>\s"]+)\s*>?$');
    if spec is not null then
        return lower(spec);
    end if;
    if position('<' in v) > 0 then
        -- An unquoted comma or semicolon before the bracket ends the first address there,
        -- which then has no @: parseaddr reads no address.
        if regexp_replace(substring(v from '^[^<]*'), '"[^"]*"', '', 'g') ~ '[,;]' then
            return null;
        end if;
        spec := substring(v from '<([^<>]*)>?$');
    else
        spec := substring(v from '^([^<>]*?)>?$');
    end if;
    -- parseaddr drops the space around dots and the at sign, keeps it between words.
    spec := btrim(regexp_replace(spec, '\s*([.@])\s*', '\1', 'g'), E' \t\r\n\f\v');
    if spec is null or spec !~ '^[^@]+@[^@]*[^@]$' or spec ~ '[,;:\[\]"]'
       or substring(spec from '@(.*)$') ~ '\s' then
        return null;
    end if;
    return lower(spec);
end;
$$;

-- The normalized addresses a message of the channel is sent to: an email's `to`, `cc` and
-- `bcc` (a string or a list each: Postmark's and SES's payloads), an SMS's `to` (Twilio's).
-- Any one of them suppressed holds the whole message: it cannot be sent to the others
-- without being sent to it. plpgsql, not a set-returning SQL query: the claim calls it
-- once per row.
create function tickwork_message_addresses(channel text, payload jsonb) returns text[]
language plpgsql immutable strict parallel safe as $$
declare
    found  text[] := '{}';
    field  text;
    value  jsonb;
    item   jsonb;
    one    text;
begin
    foreach field in array case channel when 'email' then array['to', 'cc', 'bcc']
                                        when 'sms' then array['to']
                                        else '{}'::text[] end loop
        value := payload -> field;
        if value is null then
            continue;
        elsif jsonb_typeof(value) = 'string' then
            one := tickwork_normalize_address(channel, value #>> '{}');
            if one is not null then
                found := found || one;
            end if;
        elsif jsonb_typeof(value) = 'array' then
            for item in select jsonb_array_elements(value) loop
                if jsonb_typeof(item) = 'string' then
                    one := tickwork_normalize_address(channel, item #>> '{}');
                    if one is not null then
                        found := found || one;
                    end if;
                end if;
            end loop;
        end if;
    end loop;
    return found;
end;
$$;

-- What the claim looks up: tickwork_message_addresses, with the commonest payload (one plain
-- `to`, no cc or bcc) read without a plpgsql call. A SQL function of one expression, so
-- the planner inlines it into the claim. The plain forms are those parseaddr and
-- normalize_address return as they are, lowercased (dot-atoms; an E.164 number).
create function tickwork_claim_addresses(channel text, payload jsonb) returns text[]
language sql immutable parallel safe as $$
    select case
        when jsonb_typeof(payload -> 'to') = 'string'
             and not (payload ? 'cc' or payload ? 'bcc')
             and payload ->> 'to' ~ case channel
                 when 'sms' then '^\+[1-9][0-9]{6,14}$'
                 when 'email'
                 then '^[A-Za-z0-9_%+-]+(\.[A-Za-z0-9_%+-]+)*@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$'
             end
        then array[lower(payload ->> 'to')]
        else tickwork_message_addresses(channel, payload)
    end
$$;

-- An address as logs and answers about an action show it: enough for a person who knows
-- it to recognise it, not enough to read it (mask_address in Python).
create function tickwork_mask_address(channel text, address text) returns text
language sql immutable strict parallel safe as $$
    select case
        when channel = 'email' and position('@' in address) > 1 then
            left(address, 1) || '***' || substring(address from '@[^@]*$')
        when channel = 'sms' and length(address) > 5 then
            left(address, 3) || repeat('*', length(address) - 5) || right(address, 2)
        else '***'
    end
$$;
