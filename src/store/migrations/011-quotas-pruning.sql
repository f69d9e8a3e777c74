-- Issue 21, item 6: per-principal caps on proposals and revisions, pruning of abandoned proposals and
-- old unreviewed revisions, and an archive delete that stays cheap as segments accumulate.

-- Revisions a principal wrote in the last hour (quotas.max_revisions_per_hour): a range seek.
CREATE INDEX revisions_by_creator ON revisions (created_by, created_at);
-- The prune loop walks revisions oldest first.
CREATE INDEX revisions_by_age ON revisions (created_at, id);
-- Open proposals of an owner (quotas.max_open_proposals): a seek per open state.
CREATE INDEX proposals_by_owner_state ON proposals (owner_id, state);

-- What each principal's revisions hold, kept by triggers so the quota check is one row read however
-- many revisions there are. Bytes are the spec's stored JSON (UTF-8).
CREATE TABLE principal_revision_usage (
  principal_id TEXT PRIMARY KEY,
  revisions    INTEGER NOT NULL CHECK (revisions >= 0),
  bytes        INTEGER NOT NULL CHECK (bytes >= 0)
) WITHOUT ROWID;

INSERT INTO principal_revision_usage (principal_id, revisions, bytes)
  SELECT created_by, count(*), sum(length(CAST(spec AS BLOB))) FROM revisions GROUP BY created_by;

CREATE TRIGGER revisions_usage_insert AFTER INSERT ON revisions
BEGIN
  INSERT INTO principal_revision_usage (principal_id, revisions, bytes)
    VALUES (NEW.created_by, 1, length(CAST(NEW.spec AS BLOB)))
    ON CONFLICT (principal_id) DO UPDATE SET revisions = revisions + 1, bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER revisions_usage_delete AFTER DELETE ON revisions
BEGIN
  UPDATE principal_revision_usage
     SET revisions = revisions - 1, bytes = bytes - length(CAST(OLD.spec AS BLOB))
   WHERE principal_id = OLD.created_by;
END;

-- The same rule as before (only rows a recorded segment covers may be deleted), asked of the one
-- segment that could cover the row (a seek on last_seq): the old form scanned every segment per row.
DROP TRIGGER audit_events_append_only_delete;
CREATE TRIGGER audit_events_append_only_delete BEFORE DELETE ON audit_events
WHEN NOT EXISTS (
  SELECT 1 FROM (SELECT first_seq FROM audit_archive WHERE last_seq >= OLD.seq ORDER BY last_seq LIMIT 1)
   WHERE first_seq <= OLD.seq)
BEGIN
  SELECT RAISE(ABORT, 'audit_events is append-only: only archived rows may be deleted');
END;
