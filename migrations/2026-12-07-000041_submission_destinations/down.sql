DROP FUNCTION submission_destinations(varchar[], varchar[], json[], timestamptz);
