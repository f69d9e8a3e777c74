-- Workers, cards, leases fenced by lease_epoch, executions, logs, outputs, and the master's outbox.

CREATE TABLE workers (
  id            TEXT PRIMARY KEY,
  hostname      TEXT NOT NULL,
  provider      TEXT NOT NULL CHECK (provider IN ('nvidia','hy','sim')),
  version       TEXT NOT NULL,
  boot_id       TEXT NOT NULL,
  cards         TEXT NOT NULL CHECK (json_valid(cards)),   -- last known card identities
  draining      INTEGER NOT NULL DEFAULT 0 CHECK (draining IN (0,1)),
  first_seen_at INTEGER NOT NULL,
  last_seen_at  INTEGER NOT NULL
);

CREATE TABLE cordons (
  worker_id  TEXT NOT NULL,
  card_index INTEGER NOT NULL CHECK (card_index >= 0),
  reason     TEXT NOT NULL,
  actor      TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (worker_id, card_index)
) WITHOUT ROWID;

-- Highest lease_epoch ever issued per card; epochs are never reused.
CREATE TABLE card_epochs (
  worker_id  TEXT NOT NULL,
  card_index INTEGER NOT NULL,
  epoch      INTEGER NOT NULL CHECK (epoch >= 1),
  PRIMARY KEY (worker_id, card_index)
) WITHOUT ROWID;

CREATE TABLE leases (
  id           TEXT PRIMARY KEY,
  task_id      TEXT NOT NULL REFERENCES tasks(id),
  worker_id    TEXT NOT NULL,
  lease_epoch  INTEGER NOT NULL CHECK (lease_epoch >= 1),
  state        TEXT NOT NULL CHECK (state IN ('ACTIVE','RELEASING','RELEASED','QUARANTINED')),
  reason       TEXT,
  created_at   INTEGER NOT NULL,
  updated_at   INTEGER NOT NULL,
  released_at  INTEGER,
  CHECK ((state = 'RELEASED') = (released_at IS NOT NULL))
);
CREATE INDEX leases_by_task ON leases (task_id);
CREATE INDEX leases_live ON leases (state) WHERE state <> 'RELEASED';

CREATE TABLE lease_cards (
  lease_id   TEXT NOT NULL REFERENCES leases(id),
  worker_id  TEXT NOT NULL,
  card_index INTEGER NOT NULL,
  card_uuid  TEXT NOT NULL,
  live       INTEGER NOT NULL DEFAULT 1 CHECK (live IN (0,1)),
  PRIMARY KEY (lease_id, card_index)
) WITHOUT ROWID;
-- The invariant that matters most: a card is held by at most one live lease.
CREATE UNIQUE INDEX lease_cards_one_live_lease_per_card ON lease_cards (worker_id, card_index) WHERE live = 1;

CREATE TABLE executions (
  id             TEXT PRIMARY KEY,
  task_id        TEXT NOT NULL REFERENCES tasks(id),
  lease_id       TEXT NOT NULL UNIQUE REFERENCES leases(id),
  assignment_id  TEXT NOT NULL UNIQUE,
  worker_id      TEXT NOT NULL,
  lease_epoch    INTEGER NOT NULL,
  phase          TEXT NOT NULL CHECK (phase IN ('assigned','accepted','rejected','started','exited','cleaned','cleanup_failed')),
  exit_code      INTEGER,
  signal         TEXT,
  failure_reason TEXT,
  outputs        TEXT CHECK (outputs IS NULL OR json_valid(outputs)),
  detail         TEXT,
  created_at     INTEGER NOT NULL,
  updated_at     INTEGER NOT NULL,
  offline_since  INTEGER
);
CREATE INDEX executions_by_task ON executions (task_id);
CREATE INDEX executions_by_worker ON executions (worker_id, phase);

CREATE TABLE task_logs (
  execution_id TEXT NOT NULL,
  stream       TEXT NOT NULL CHECK (stream IN ('stdout','stderr')),
  offset       INTEGER NOT NULL CHECK (offset >= 0),
  data         BLOB NOT NULL,
  PRIMARY KEY (execution_id, stream, offset)
) WITHOUT ROWID;

CREATE TABLE task_outputs (
  execution_id TEXT NOT NULL,
  path         TEXT NOT NULL,
  size         INTEGER NOT NULL CHECK (size >= 0),
  sha256       TEXT NOT NULL CHECK (length(sha256) = 64),
  content      BLOB NOT NULL,
  created_at   INTEGER NOT NULL,
  PRIMARY KEY (execution_id, path)
) WITHOUT ROWID;

-- Messages to workers, kept until acknowledged and resent after a reconnect (DESIGN §8).
CREATE TABLE master_outbox (
  id         INTEGER PRIMARY KEY,
  worker_id  TEXT NOT NULL,
  boot_id    TEXT NOT NULL,
  seq        INTEGER NOT NULL CHECK (seq >= 1),
  body       TEXT NOT NULL CHECK (json_valid(body)),
  created_at INTEGER NOT NULL,
  acked_at   INTEGER,
  UNIQUE (boot_id, seq)
);
CREATE INDEX master_outbox_unacked ON master_outbox (worker_id, id) WHERE acked_at IS NULL;

-- Highest seq processed per worker boot: duplicates are acknowledged and dropped.
CREATE TABLE worker_marks (
  worker_id  TEXT NOT NULL,
  boot_id    TEXT NOT NULL,
  seq        INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (worker_id, boot_id)
) WITHOUT ROWID;
