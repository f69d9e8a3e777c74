-- Version 5 (issue 12, ADR 0013): Slurm workers record the job behind an execution (JSON: job_id,
-- state, pending_reason, binding), so a restarted worker finds its jobs by id and fences the cluster
-- with them. Null on a local worker.
-- Shipped: never edit; add a file instead.
ALTER TABLE executions ADD COLUMN slurm_json TEXT;
