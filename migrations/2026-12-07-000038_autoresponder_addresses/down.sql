DROP FUNCTION autoresponder_address_digest(varchar);

CREATE OR REPLACE FUNCTION submitted_address(fields json, field varchar)
RETURNS varchar LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN json_typeof(fields -> field) = 'array'
             AND json_array_length(fields -> field) = 1
             AND length(btrim(fields -> field ->> 0, ' ')) <= 254
             AND btrim(fields -> field ->> 0, ' ')
                 ~ '^[A-Za-z0-9.!#$%&''*+/=?^_`{|}~-]+@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$'
        THEN btrim(fields -> field ->> 0, ' ')
    END
$$;
