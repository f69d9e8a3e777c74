-- Worker local store, version 1: card epochs, executions, the outbox and its seqs, master marks.
-- Shipped: never edit (test/unit/worker/local-store-schema.test.ts pins its digest); add a file instead.
  CREATE TABLE card_epochs (
    card_index INTEGER PRIMARY KEY CHECK (card_index >= 0),
    epoch INTEGER NOT NULL CHECK (epoch >= 1)
  );
  CREATE TABLE executions (
    execution_id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    lease_epoch INTEGER NOT NULL CHECK (lease_epoch >= 1),
    phase TEXT NOT NULL
      CHECK (phase IN ('accepted', 'rejected', 'started', 'exited', 'cleaned', 'cleanup_failed')),
    plan_json TEXT NOT NULL,
    result_json TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  );
  CREATE INDEX executions_unfinished ON executions (created_at)
    WHERE phase NOT IN ('rejected', 'cleaned', 'cleanup_failed');
  CREATE TABLE outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    boot_id TEXT NOT NULL,
    seq INTEGER NOT NULL CHECK (seq >= 1),
    message_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    acked_at INTEGER,
    UNIQUE (boot_id, seq)
  );
  CREATE INDEX outbox_unacked ON outbox (id) WHERE acked_at IS NULL;
  CREATE TABLE outbox_seqs (
    boot_id TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL CHECK (last_seq >= 0)
  );
  CREATE TABLE master_marks (
    boot_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL CHECK (seq >= 0),
    updated_at INTEGER NOT NULL
  );
