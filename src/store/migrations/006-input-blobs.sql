-- Inputs (issue 13): content-addressed blobs that task specs name by sha256 in `inputs`. The bytes live
-- in the database itself (one row per distinct content), so an upload, the idempotency record and the
-- uploader's quota commit together, and a blob is never half written. `blob_uploads` says who uploaded
-- what (each principal's quota counts a blob once); garbage collection removes blobs that no live
-- revision or recent task names (src/store/blobs-repo.ts).

CREATE TABLE blobs (
  sha256     TEXT PRIMARY KEY CHECK (length(sha256) = 64),
  size       INTEGER NOT NULL CHECK (size >= 0),
  content    BLOB NOT NULL,
  created_at INTEGER NOT NULL,
  CHECK (length(content) = size)
);

CREATE TABLE blob_uploads (
  principal_id TEXT NOT NULL REFERENCES principals(id),
  sha256       TEXT NOT NULL REFERENCES blobs(sha256) ON DELETE CASCADE,
  uploaded_at  INTEGER NOT NULL,
  PRIMARY KEY (principal_id, sha256)
);

CREATE INDEX blob_uploads_by_blob ON blob_uploads (sha256);

-- Named data mounts (issue 13): the mounts each worker declared in its latest hello, as JSON
-- `[{"name": "imagenet-val", "read_only": true}]`. Tasks asking for mounts go only where all are.
ALTER TABLE workers ADD COLUMN mounts TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(mounts));
