DROP TABLE server_secrets;
DROP TABLE submission_file_chunks;
DROP TABLE submission_files;
ALTER TABLE endpoints DROP COLUMN file_uploads;
