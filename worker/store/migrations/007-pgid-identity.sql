-- Version 7: the process group's identity beside its id. A restarted worker recognised the group of an
-- execution it lost by GPU_BROKER_EXECUTION_ID in a member's environment, which an unsandboxed task
-- controls (`exec env -i …` hid it, and the group was left running). The leader's start time
-- (/proc/PID/stat field 22) and the boot it started in name the process for good. Null on rows from
-- before, which keep the environment check.
-- Shipped: never edit; add a file instead.
ALTER TABLE executions ADD COLUMN pgid_start TEXT;
ALTER TABLE executions ADD COLUMN pgid_boot TEXT;
