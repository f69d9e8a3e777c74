-- Version 4 (ADR 0014): the file itself refuses an execution phase change that EXECUTION_TABLE
-- (src/domain/execution.ts) does not list, and a first record at any phase but accepted or rejected,
-- so no code path (nor a hand edit through the worker's code) can jump or rewind a phase.
-- test/unit/worker/local-store-schema.test.ts checks these lists against the table.
-- Shipped: never edit; add a file instead.
CREATE TRIGGER executions_first_phase BEFORE INSERT ON executions
WHEN NEW.phase NOT IN ('accepted', 'rejected')
BEGIN
  SELECT RAISE(ABORT, 'an execution is first recorded accepted or rejected');
END;

CREATE TRIGGER executions_phase_moves BEFORE UPDATE OF phase ON executions
WHEN NEW.phase IS NOT OLD.phase AND NOT (
  (OLD.phase = 'accepted' AND NEW.phase IN ('started', 'exited'))
  OR (OLD.phase = 'started' AND NEW.phase = 'exited')
  OR (OLD.phase = 'exited' AND NEW.phase IN ('cleaned', 'cleanup_failed'))
  OR (OLD.phase = 'cleanup_failed' AND NEW.phase = 'cleaned')
)
BEGIN
  SELECT RAISE(ABORT, 'execution phase move not in the execution table');
END;
