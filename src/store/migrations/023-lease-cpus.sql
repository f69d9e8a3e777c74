-- CPUs a lease's task asked for (its spec's `limits.cpus`), so the scheduler never promises a worker's host
-- more CPUs than it has (docs/operations.md "Task limits"); NULL: the task asked for none (it is not
-- capped and takes no CPUs from its host's count).

ALTER TABLE leases ADD COLUMN cpus INTEGER CHECK (cpus IS NULL OR cpus >= 1);
