-- A host never has more memory promised than it has (issue 38 item 7): each lease records the memory its
-- task was given on that worker (the plan's resolved limits.memory_mib), NULL where the worker's host was
-- not known (an older worker, a Slurm pool) or for leases made before this. The scheduler sums the live
-- ones per worker against the host's RAM less the reserve.

ALTER TABLE leases ADD COLUMN memory_mib INTEGER CHECK (memory_mib IS NULL OR memory_mib >= 0);
