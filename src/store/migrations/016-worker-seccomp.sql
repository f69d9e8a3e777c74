-- The syscall filter (issue 36 item 1): what each worker's process tasks run under, as its latest hello
-- said: JSON {"version": "v1-<12 hex>", "allowed": [group, ...]} or NULL (no filter: unsandboxed, a host
-- the table has no numbers for, or a worker from before the filter).

ALTER TABLE workers ADD COLUMN seccomp TEXT CHECK (seccomp IS NULL OR json_valid(seccomp));
