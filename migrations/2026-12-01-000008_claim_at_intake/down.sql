DROP FUNCTION intake_claim_room(varchar[], timestamptz, integer, integer);
