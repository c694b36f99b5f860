ALTER TABLE management_api_keys DROP COLUMN role;
