DROP FUNCTION erase_endpoint(varchar);
