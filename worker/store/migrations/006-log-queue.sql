-- Version 6: the log lane (issue 21).
-- Shipped: never edit; add a file instead.
  -- Log chunks wait here, per execution, until the sender gives them a seq and moves them to the outbox,
  -- one fair turn per execution at a time: one task's flood never queues ahead of another task's reports.
  CREATE TABLE log_queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL,
    stream TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    offset INTEGER NOT NULL CHECK (offset >= 0),
    data TEXT NOT NULL
  );
  CREATE INDEX log_queue_by_execution ON log_queue (execution_id, id);
