DROP FUNCTION rate_limit_holds(integer, integer);
