-- Version 2: the process group id of a running execution; the outbox message's type.
-- Shipped: never edit; add a file instead.
  ALTER TABLE executions ADD COLUMN pgid INTEGER CHECK (pgid IS NULL OR pgid > 1);
  -- The message's type, so superseding old samples need not parse every queued message's JSON.
  ALTER TABLE outbox ADD COLUMN kind TEXT;
