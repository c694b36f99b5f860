-- Nothing to undo: migration destinations' down drops the column.
SELECT 1;
