-- Issue 12, gap 1: qualification on a Slurm pool worker (docs/decisions/0017-slurm-qualification.md).
-- The run's two-node rung, when the pool has two nodes or more: {"cards": 2k, "per_node": k}; NULL for
-- a local worker or a single-node pool.
ALTER TABLE qualification_runs ADD COLUMN span TEXT CHECK (span IS NULL OR json_valid(span));
