-- Form stamps that have judged a submission (docs/intake.md, "The form stamp"): a stamp
-- vouches for one submission only, in whichever process it arrives, so spending one is
-- an insert that only one submission can win. Rows are kept until the stamp is too old
-- to be accepted anyway (`expires_at`), then forgotten by the workers' hourly upkeep. A
-- logged table, unlike the rate-limit counters: after a crash or a failover a stamp
-- spent before must still be spent.
CREATE TABLE form_stamps_spent (
    stamp_digest varchar(64) PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX form_stamps_spent_expires_at_idx ON form_stamps_spent (expires_at);
