DROP TABLE audit_entries;
ALTER TABLE management_api_keys DROP COLUMN project_id, DROP COLUMN expires_at;
ALTER TABLE endpoints DROP COLUMN project_id;
DROP TABLE projects;
