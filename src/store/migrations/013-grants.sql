-- Issue 23 §1: standing grants (docs/decisions/0029-grants.md). A grant is immutable once written: only
-- its state, its decider and its counters change, and a trigger refuses any other column. The budgets
-- are CHECKed here too, so no bug in the broker can overspend one.

CREATE TABLE standing_grants (
  id                    TEXT PRIMARY KEY,
  grantee_id            TEXT NOT NULL REFERENCES principals(id),
  created_by            TEXT NOT NULL REFERENCES principals(id),
  decided_by            TEXT REFERENCES principals(id),
  base_revision_id      TEXT NOT NULL REFERENCES revisions(id),
  supersedes            TEXT REFERENCES standing_grants(id),
  scope                 TEXT NOT NULL CHECK (json_valid(scope)),
  reason                TEXT NOT NULL,
  max_runs              INTEGER NOT NULL CHECK (max_runs >= 1),
  max_card_seconds      INTEGER NOT NULL CHECK (max_card_seconds >= 1),
  concurrency           INTEGER NOT NULL CHECK (concurrency >= 1),
  breaker_k             INTEGER NOT NULL CHECK (breaker_k >= 1),
  expires_at            INTEGER NOT NULL,
  state                 TEXT NOT NULL CHECK (state IN
                          ('REQUESTED','ACTIVE','SUSPENDED','REJECTED','REVOKED','EXPIRED')),
  decision_comment      TEXT,
  runs_used             INTEGER NOT NULL DEFAULT 0 CHECK (runs_used BETWEEN 0 AND max_runs),
  card_seconds_charged  INTEGER NOT NULL DEFAULT 0 CHECK (card_seconds_charged >= 0),
  card_seconds_reserved INTEGER NOT NULL DEFAULT 0 CHECK (card_seconds_reserved >= 0),
  running               INTEGER NOT NULL DEFAULT 0 CHECK (running BETWEEN 0 AND concurrency),
  consecutive_failures  INTEGER NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
  alerted               TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(alerted)),
  created_at            INTEGER NOT NULL,
  updated_at            INTEGER NOT NULL,
  decided_at            INTEGER,
  CHECK (card_seconds_charged + card_seconds_reserved <= max_card_seconds),
  CHECK (decided_by IS NULL OR decided_by <> grantee_id),
  CHECK (state NOT IN ('ACTIVE','SUSPENDED') OR decided_by IS NOT NULL)
);
CREATE INDEX standing_grants_by_grantee ON standing_grants (grantee_id, state);
CREATE INDEX standing_grants_by_expiry ON standing_grants (state, expires_at);

CREATE TRIGGER standing_grants_frozen BEFORE UPDATE OF
  id, grantee_id, created_by, base_revision_id, supersedes, scope, reason, max_runs, max_card_seconds,
  concurrency, breaker_k, expires_at, created_at ON standing_grants
BEGIN
  SELECT RAISE(ABORT, 'a standing grant is immutable: request a new one that supersedes it');
END;

-- One row per run a grant approved: its receipt and its charge.
CREATE TABLE standing_grant_runs (
  grant_id              TEXT NOT NULL REFERENCES standing_grants(id),
  task_id               TEXT NOT NULL UNIQUE REFERENCES tasks(id),
  proposal_id           TEXT NOT NULL REFERENCES proposals(id),
  revision_id           TEXT NOT NULL REFERENCES revisions(id),
  cards                 INTEGER NOT NULL CHECK (cards >= 1),
  card_seconds_reserved INTEGER NOT NULL CHECK (card_seconds_reserved >= 0),
  card_seconds_charged  INTEGER CHECK (card_seconds_charged IS NULL OR card_seconds_charged >= 0),
  outcome               TEXT CHECK (outcome IS NULL OR outcome IN ('COMPLETED','FAILED','CANCELLED')),
  receipt               TEXT NOT NULL CHECK (json_valid(receipt)),
  created_at            INTEGER NOT NULL,
  settled_at            INTEGER,
  PRIMARY KEY (grant_id, task_id),
  CHECK ((outcome IS NULL) = (settled_at IS NULL))
);

-- A review written by a grant's auto-approval names the grant; reviewer_id is then the grant's decider.
ALTER TABLE reviews ADD COLUMN grant_id TEXT REFERENCES standing_grants(id);
