-- The Slurm backend (issue 12, docs/decisions/0013-slurm-backend.md). `backend` is how a worker runs
-- tasks, as its latest hello said ('local' for rows from before, which never said). `slurm` is a Slurm
-- worker's pool (JSON: partition, nodes) and NULL on a local worker. On an execution, `slurm` is the job
-- behind it (JSON: job_id, state, pending_reason, binding) as the worker last reported it.

ALTER TABLE workers ADD COLUMN backend TEXT NOT NULL DEFAULT 'local' CHECK (backend IN ('local','slurm'));
ALTER TABLE workers ADD COLUMN slurm TEXT CHECK (slurm IS NULL OR json_valid(slurm));
ALTER TABLE executions ADD COLUMN slurm TEXT CHECK (slurm IS NULL OR json_valid(slurm));
