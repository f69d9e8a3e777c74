-- A host is never promised more memory or disk than it has (issue 38 item 7, issue 36 items 3 and 6):
-- each lease records the memory and the task-dir disk its task was given on that worker (the plan's
-- resolved limits.memory_mib and limits.disk_mib), NULL where the worker's host was not known (an older
-- worker, a Slurm pool) or for leases made before this. The scheduler sums the live ones per worker
-- against the host's RAM and free disk less the reserve.

ALTER TABLE leases ADD COLUMN memory_mib INTEGER CHECK (memory_mib IS NULL OR memory_mib >= 0);
ALTER TABLE leases ADD COLUMN disk_mib INTEGER CHECK (disk_mib IS NULL OR disk_mib >= 0);
