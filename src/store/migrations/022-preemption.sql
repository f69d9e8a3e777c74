-- Reclaim by preemption (docs/operations.md "Borrowing and reclaim", docs/decisions/0044-reclaim-by-preemption.md).
--
-- accounts.preemptible: 1 makes every task of the account preemptible while the account borrows (holds
-- more than its nominal share), whatever its spec says; 0 (the default) leaves it to the spec's
-- `preemptible`.
--
-- preemptions: one row per lease the scheduler asked to give its cards back, for the queued task that
-- asked within its account's nominal share (`for_task_id`). A task's rows count towards the cap on how
-- often one task is preempted; a row whose lease is not yet released (or was released a moment ago) makes
-- its claimant go first for the cards it frees.

ALTER TABLE accounts ADD COLUMN preemptible INTEGER NOT NULL DEFAULT 0 CHECK (preemptible IN (0, 1));

CREATE TABLE preemptions (
  lease_id      TEXT PRIMARY KEY REFERENCES leases(id),
  task_id       TEXT NOT NULL REFERENCES tasks(id),
  for_task_id   TEXT NOT NULL REFERENCES tasks(id),
  worker_id     TEXT NOT NULL,
  lease_epoch   INTEGER NOT NULL CHECK (lease_epoch >= 1),
  grace_seconds INTEGER NOT NULL CHECK (grace_seconds BETWEEN 0 AND 3600),
  requested_at  INTEGER NOT NULL,
  CHECK (task_id <> for_task_id)
) WITHOUT ROWID;

CREATE INDEX preemptions_by_task ON preemptions (task_id);
CREATE INDEX preemptions_by_claimant ON preemptions (for_task_id);
