-- Audit retention and incremental verification (issue 14).
--
-- `audit_archive` lists segments of the chain moved out of `audit_events` into JSON-lines files under
-- the data dir: rows first_seq..last_seq, whose first row links to `first_prev_hash` and whose last row
-- hashes to `last_hash` (the `prev_hash` of the first row still live). The delete trigger is replaced:
-- a row may be deleted only once a recorded segment covers it, so retention is the only way rows leave.
--
-- `audit_checkpoint` (one row) remembers the last row the master verified, so a restart continues the
-- incremental check from there instead of walking the whole chain again; `full_at` is when the last
-- full pass finished. It is a convenience, not a trust anchor: the scheduled full pass re-walks
-- everything from the archive boundary.

CREATE TABLE audit_archive (
  first_seq       INTEGER PRIMARY KEY CHECK (first_seq >= 1),
  last_seq        INTEGER NOT NULL UNIQUE CHECK (last_seq >= first_seq),
  first_prev_hash TEXT NOT NULL CHECK (length(first_prev_hash) = 64),
  last_hash       TEXT NOT NULL CHECK (length(last_hash) = 64),
  file            TEXT NOT NULL,
  archived_at     INTEGER NOT NULL
);

CREATE TABLE audit_checkpoint (
  id           INTEGER PRIMARY KEY CHECK (id = 1),
  verified_seq INTEGER NOT NULL CHECK (verified_seq >= 0),
  verified_hash TEXT NOT NULL CHECK (length(verified_hash) = 64),
  verified_at  INTEGER NOT NULL,
  full_at      INTEGER
);

DROP TRIGGER audit_events_append_only_delete;
CREATE TRIGGER audit_events_append_only_delete BEFORE DELETE ON audit_events
WHEN NOT EXISTS (SELECT 1 FROM audit_archive WHERE OLD.seq BETWEEN first_seq AND last_seq)
BEGIN
  SELECT RAISE(ABORT, 'audit_events is append-only: only archived rows may be deleted');
END;
