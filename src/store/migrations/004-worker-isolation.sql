-- Task isolation (issue 9): how each worker runs tasks, as its latest hello said. `isolation` is
-- 'bwrap' (each task in its own bubblewrap sandbox) or 'none' (plain processes: the worker is
-- UNISOLATED and, under policy.require_isolation, gets no task). `container_engine` is the engine that
-- runs `container` tasks there, or NULL when it cannot. Rows from before this migration never said, so
-- they are unisolated with no engine until their next hello.

ALTER TABLE workers ADD COLUMN isolation TEXT NOT NULL DEFAULT 'none' CHECK (isolation IN ('bwrap','none'));
ALTER TABLE workers ADD COLUMN container_engine TEXT CHECK (container_engine IS NULL OR container_engine IN ('podman','docker'));
