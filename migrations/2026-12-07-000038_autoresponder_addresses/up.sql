-- The addresses an autoresponder answers, and the key of its once-per-address window.
--
-- submitted_address (migration spam_folder) took any run of RFC 5322 atom characters
-- before the `@`, so an address made of RFC 2047 encoded words
-- (`=?utf-8?q?…=0D=0A…?=@example.org`) passed, went out in `To` (and, through the same
-- rule in the worker, in a notification's `Reply-To`), where a mail server that decodes
-- them reads a line break. It now takes a strict addr-spec only, as the worker does
-- (src/model/destination.rs `plain_address`): a local part of dot-atom characters (atoms
-- joined by single dots, at most 64 characters) without `=?` or `?=` (which open and
-- close an encoded word), and a domain of at least two LDH labels of 1–63 characters
-- (an internationalised domain in its ASCII `xn--` form); at most 254 characters in all.
-- Trimmed of spaces as before.
CREATE OR REPLACE FUNCTION submitted_address(fields json, field varchar)
RETURNS varchar LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN json_typeof(fields -> field) = 'array'
             AND json_array_length(fields -> field) = 1
             AND length(btrim(fields -> field ->> 0, ' ')) <= 254
             AND length(split_part(btrim(fields -> field ->> 0, ' '), '@', 1)) <= 64
             AND strpos(btrim(fields -> field ->> 0, ' '), '=?') = 0
             AND strpos(btrim(fields -> field ->> 0, ' '), '?=') = 0
             AND btrim(fields -> field ->> 0, ' ')
                 ~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$'
        THEN btrim(fields -> field ->> 0, ' ')
    END
$$;

-- The key of an autoresponder's window for a plain address, as the MD5 kept in
-- autoresponder_recipients.address_digest: the address lower-cased, its local part cut
-- at the first `+` (a sub-address tag) and stripped of every dot, since a provider that
-- ignores dots (Gmail, and any domain it hosts) cannot be told from the address. Two
-- mailboxes that differ only there share a window: the cost is a confirmation not sent,
-- never one too many. Addresses answered before this migration were keyed by the
-- lower-cased address; one with a dot or a `+` in its local part may get one more
-- confirmation before its old row's window ends.
CREATE FUNCTION autoresponder_address_digest(address varchar)
RETURNS varchar LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT md5(replace(split_part(split_part(lower(address), '@', 1), '+', 1), '.', '')
               || '@' || split_part(lower(address), '@', 2))
$$;
