-- Issue 21: each blob-GC batch (BlobsRepo.expireUploads) asks which uploads unfinished or recently
-- finished tasks still name. tasks_finished_at answers "finished after"; this partial index answers
-- "unfinished", so a batch reads the specs of those tasks only, never the whole task history.
CREATE INDEX tasks_unfinished ON tasks (finished_at) WHERE finished_at IS NULL;
