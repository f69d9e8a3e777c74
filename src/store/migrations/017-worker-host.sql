-- Limits follow the machine (issue 36 item 6): each worker's host as its latest hello said, JSON
-- {"memory_mib": N, "cpus": N, "disk_mib": N} or NULL (not known: an older worker, a Slurm pool). The
-- scheduler derives each task's default and largest memory and disk on that worker from it.

ALTER TABLE workers ADD COLUMN host TEXT CHECK (host IS NULL OR json_valid(host));
