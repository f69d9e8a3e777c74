-- Issue 21: each blob-GC batch (BlobsRepo.expireUploads) asks which uploads unfinished or recently
-- finished tasks still name. tasks_finished_at answers "finished after"; this partial index answers
-- "unfinished", so a batch reads the specs of those tasks only, never the whole task history.
CREATE INDEX tasks_unfinished ON tasks (finished_at) WHERE finished_at IS NULL;

-- Issue 21: a blob larger than one chunk is stored in blob_chunks (BLOB_CHUNK_BYTES each, in order),
-- its blobs row holding an empty `content` and `chunk_bytes`. A page of get_input then reads the chunks
-- it overlaps: SQLite's substr() loads a whole value per call (a 1 GiB input cost a 1 GiB read per
-- 256 KiB page), and one value is at most 1,000,000,000 bytes, below the 1 GiB an input may be. Blobs
-- stored before stay inline. blobs' CHECK changes, so the table is rebuilt (its rows copied once);
-- blob_uploads is rebuilt with it, since dropping blobs under it would cascade-delete every upload row.
CREATE TABLE blobs_v2 (
  sha256      TEXT PRIMARY KEY CHECK (length(sha256) = 64),
  size        INTEGER NOT NULL CHECK (size >= 0),
  content     BLOB NOT NULL,
  created_at  INTEGER NOT NULL,
  chunk_bytes INTEGER CHECK (chunk_bytes IS NULL OR chunk_bytes > 0),
  CHECK (length(content) = CASE WHEN chunk_bytes IS NULL THEN size ELSE 0 END)
);
INSERT INTO blobs_v2 (sha256, size, content, created_at) SELECT sha256, size, content, created_at FROM blobs;

CREATE TABLE blob_uploads_v2 (
  principal_id TEXT NOT NULL REFERENCES principals(id),
  sha256       TEXT NOT NULL REFERENCES blobs_v2(sha256) ON DELETE CASCADE,
  uploaded_at  INTEGER NOT NULL,
  PRIMARY KEY (principal_id, sha256)
);
INSERT INTO blob_uploads_v2 SELECT principal_id, sha256, uploaded_at FROM blob_uploads;

DROP TABLE blob_uploads;
DROP TABLE blobs;
ALTER TABLE blobs_v2 RENAME TO blobs;
ALTER TABLE blob_uploads_v2 RENAME TO blob_uploads;
CREATE INDEX blob_uploads_by_blob ON blob_uploads (sha256);

CREATE TABLE blob_chunks (
  sha256 TEXT NOT NULL REFERENCES blobs(sha256) ON DELETE CASCADE,
  idx    INTEGER NOT NULL CHECK (idx >= 0),
  bytes  BLOB NOT NULL,
  PRIMARY KEY (sha256, idx)
);
