-- Nothing to undo: a validated constraint is the same rule as a NOT VALID one for rows to
-- come; migration destinations' down replaces it.
SELECT 1;
