-- Issue 35 item 4: the requester of a standing grant never decides it (decide_grant refuses it with
-- SELF_GRANT_FORBIDDEN; this is the same rule in the database, as decided_by <> grantee_id is). A
-- trigger, not a CHECK: SQLite cannot add a CHECK to an existing table without rebuilding it.
-- Fires on a change of decider only: every counter update also writes decided_by (unchanged).
CREATE TRIGGER standing_grants_requester_never_decides BEFORE UPDATE OF decided_by ON standing_grants
WHEN NEW.decided_by IS NOT OLD.decided_by AND NEW.decided_by = NEW.created_by
BEGIN
  SELECT RAISE(ABORT, 'the requester of a standing grant may not decide it');
END;

CREATE TRIGGER standing_grants_requester_never_decides_insert BEFORE INSERT ON standing_grants
WHEN NEW.decided_by IS NOT NULL AND NEW.decided_by = NEW.created_by
BEGIN
  SELECT RAISE(ABORT, 'the requester of a standing grant may not decide it');
END;
