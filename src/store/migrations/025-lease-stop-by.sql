-- A backfilled lease's deadline (docs/decisions/0049-backfill-into-reservations.md): its worker stops the run
-- TIMED_OUT by then at the latest (plan `stop_within_seconds`, counted from when it begins the run), so
-- the scheduler counts it as the lease's end even before the task started. NULL: not backfilled (the
-- lease ends by its task's start plus its time limit, unknown before the start).

ALTER TABLE leases ADD COLUMN stop_by INTEGER CHECK (stop_by IS NULL OR stop_by >= 0);
