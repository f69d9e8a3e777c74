-- The qualification preflight (issue 11, item 1): what the worker's qualification interpreter can do,
-- from the `probe` message it sends after each welcome (JSON: python, torch_version, backend, error,
-- probed_at). NULL until the current worker process has reported: a hello clears it, so a stale answer
-- from before a restart (torch since installed) never refuses a run.

ALTER TABLE workers ADD COLUMN qualification_probe TEXT CHECK (qualification_probe IS NULL OR json_valid(qualification_probe));
