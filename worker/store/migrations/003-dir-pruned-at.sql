-- Version 3: retention of execution directories.
-- Shipped: never edit; add a file instead.
  -- When the execution's directory was deleted by retention (issue 14), so it is not listed again.
  ALTER TABLE executions ADD COLUMN dir_pruned_at INTEGER;
