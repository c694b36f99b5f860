DROP FUNCTION handable_destinations(varchar[], integer[], integer);
