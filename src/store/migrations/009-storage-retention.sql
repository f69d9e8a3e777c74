-- Issue 10, row 4: retention of task logs and outputs, and a row the storage guard writes to find out
-- whether the store takes writes again after SQLITE_FULL.

-- When the retention sweep deleted the task's logs / output files (ms since the epoch); NULL: kept.
ALTER TABLE tasks ADD COLUMN logs_pruned_at INTEGER;
ALTER TABLE tasks ADD COLUMN outputs_pruned_at INTEGER;

-- The sweep walks FINAL tasks by the time they ended.
CREATE INDEX tasks_finished_at ON tasks (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE storage_probe (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  at INTEGER NOT NULL
);
