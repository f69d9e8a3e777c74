-- Principals, proposals, revisions, reviews, tasks, idempotency keys and the audit chain.
-- Times are integer milliseconds since the Unix epoch, passed in from the injected clock.

CREATE TABLE principals (
  id          TEXT PRIMARY KEY,
  name        TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64),
  roles       TEXT NOT NULL CHECK (json_valid(roles) AND json_array_length(roles) >= 1),
  worker_id   TEXT,
  token_hash  TEXT NOT NULL UNIQUE CHECK (length(token_hash) = 64),
  created_at  INTEGER NOT NULL,
  revoked_at  INTEGER
);

CREATE TABLE proposals (
  id                  TEXT PRIMARY KEY,
  owner_id            TEXT NOT NULL REFERENCES principals(id),
  state               TEXT NOT NULL CHECK (state IN
                        ('DRAFT','IN_REVIEW','CHANGES_REQUESTED','APPROVED','REJECTED','CANCELLED','EXPIRED')),
  current_revision_id TEXT NOT NULL,
  task_id             TEXT,
  created_at          INTEGER NOT NULL,
  updated_at          INTEGER NOT NULL,
  expires_at          INTEGER,
  CHECK ((state = 'APPROVED') = (task_id IS NOT NULL)),
  CHECK ((state IN ('APPROVED','REJECTED','CANCELLED','EXPIRED')) = (expires_at IS NULL))
);
CREATE INDEX proposals_by_owner ON proposals (owner_id, id);
CREATE INDEX proposals_by_state ON proposals (state, id);
CREATE INDEX proposals_by_expiry ON proposals (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE revisions (
  id           TEXT PRIMARY KEY,
  proposal_id  TEXT NOT NULL REFERENCES proposals(id),
  number       INTEGER NOT NULL CHECK (number >= 1),
  spec         TEXT NOT NULL CHECK (json_valid(spec)),
  digest       TEXT NOT NULL CHECK (length(digest) = 64),
  findings     TEXT NOT NULL CHECK (json_valid(findings)),
  created_by   TEXT NOT NULL REFERENCES principals(id),
  created_at   INTEGER NOT NULL,
  confirmed_at INTEGER,
  UNIQUE (proposal_id, number)
);

-- Revisions are immutable once written; only confirmed_at may be set, once.
CREATE TRIGGER revisions_are_immutable
BEFORE UPDATE OF id, proposal_id, number, spec, digest, findings, created_by, created_at ON revisions
BEGIN
  SELECT RAISE(ABORT, 'revisions are immutable');
END;

-- ... and confirmed_at is set once: a confirmed revision stays confirmed at that time.
CREATE TRIGGER revisions_confirmed_once
BEFORE UPDATE OF confirmed_at ON revisions
WHEN OLD.confirmed_at IS NOT NULL
BEGIN
  SELECT RAISE(ABORT, 'a revision is confirmed once');
END;

CREATE TABLE reviews (
  id              TEXT PRIMARY KEY,
  proposal_id     TEXT NOT NULL REFERENCES proposals(id),
  revision_id     TEXT NOT NULL REFERENCES revisions(id),
  revision_digest TEXT NOT NULL CHECK (length(revision_digest) = 64),
  reviewer_id     TEXT NOT NULL REFERENCES principals(id),
  decision        TEXT NOT NULL CHECK (decision IN ('APPROVE','REQUEST_CHANGES','REJECT')),
  comments        TEXT NOT NULL,
  created_at      INTEGER NOT NULL
);
-- One decision per confirmed revision.
CREATE UNIQUE INDEX reviews_one_per_revision ON reviews (revision_id);
CREATE INDEX reviews_by_proposal ON reviews (proposal_id, created_at);

CREATE TABLE tasks (
  id              TEXT PRIMARY KEY,
  proposal_id     TEXT NOT NULL UNIQUE REFERENCES proposals(id),
  revision_id     TEXT NOT NULL UNIQUE REFERENCES revisions(id),
  owner_id        TEXT NOT NULL REFERENCES principals(id),
  spec            TEXT NOT NULL CHECK (json_valid(spec)),
  spec_digest     TEXT NOT NULL CHECK (length(spec_digest) = 64),
  priority        INTEGER NOT NULL DEFAULT 0,
  state           TEXT NOT NULL CHECK (state IN
                    ('QUEUED','ASSIGNED','RUNNING','FINALIZING','COMPLETED','FAILED','CANCELLED','RECONCILIATION_REQUIRED')),
  desired         TEXT NOT NULL DEFAULT 'run' CHECK (desired IN ('run','cancel')),
  reason          TEXT CHECK (reason IS NULL OR json_valid(reason)),
  failure_reason  TEXT,
  exit_code       INTEGER,
  signal          TEXT,
  approved_at     INTEGER NOT NULL,
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL,
  started_at      INTEGER,
  finished_at     INTEGER,
  CHECK ((state IN ('COMPLETED','FAILED','CANCELLED')) = (finished_at IS NOT NULL))
);
CREATE INDEX tasks_by_state ON tasks (state, priority DESC, approved_at, id);
CREATE INDEX tasks_by_owner ON tasks (owner_id, id);

CREATE TABLE idempotency_keys (
  principal_id   TEXT NOT NULL,
  operation      TEXT NOT NULL,
  key            TEXT NOT NULL,
  request_digest TEXT NOT NULL,
  response       TEXT NOT NULL CHECK (json_valid(response)),
  created_at     INTEGER NOT NULL,
  PRIMARY KEY (principal_id, operation, key)
) WITHOUT ROWID;

CREATE TABLE audit_events (
  seq          INTEGER PRIMARY KEY,
  at           INTEGER NOT NULL,
  actor        TEXT NOT NULL,
  action       TEXT NOT NULL,
  subject_type TEXT NOT NULL,
  subject_id   TEXT NOT NULL,
  data         TEXT NOT NULL CHECK (json_valid(data)),
  prev_hash    TEXT NOT NULL CHECK (length(prev_hash) = 64),
  hash         TEXT NOT NULL UNIQUE CHECK (length(hash) = 64)
);
CREATE INDEX audit_by_subject ON audit_events (subject_type, subject_id, seq);

CREATE TRIGGER audit_events_append_only_update BEFORE UPDATE ON audit_events
BEGIN
  SELECT RAISE(ABORT, 'audit_events is append-only');
END;
CREATE TRIGGER audit_events_append_only_delete BEFORE DELETE ON audit_events
BEGIN
  SELECT RAISE(ABORT, 'audit_events is append-only');
END;
