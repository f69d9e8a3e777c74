-- The highest spec `priority` an account's tasks may ask for (docs/operations.md "Accounts and usage");
-- NULL: the spec's own bound (0..100). A revision over it has an error finding and cannot be confirmed;
-- a task approved before the maximum was lowered queues at the maximum.

ALTER TABLE accounts ADD COLUMN max_priority INTEGER CHECK (max_priority IS NULL OR max_priority BETWEEN 0 AND 100);
