DROP TABLE form_stamps_spent;
