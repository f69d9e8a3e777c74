import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BLOB_CHUNK_BYTES, BlobsRepo } from '../../../src/store/blobs-repo.js';
import { migrate, migrationsDir } from '../../../src/store/db.js';

/**
 * Blobs over BLOB_CHUNK_BYTES are stored in chunks (migration 014-blob-chunks); blobs stored before
 * stay inline, and the migration that rebuilds `blobs` keeps every blob and every upload row.
 */
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** A database migrated up to (and including) `version`. */
function dbAt(version: number): Database.Database {
  const db = new Database(':memory:');
  db.pragma('foreign_keys = ON');
  for (const file of readdirSync(migrationsDir())
    .filter((n) => /^\d{3}-.+\.sql$/.test(n))
    .sort()) {
    if (Number(file.slice(0, 3)) > version) break;
    db.exec(readFileSync(join(migrationsDir(), file), 'utf8'));
  }
  db.pragma(`user_version = ${version}`);
  return db;
}

describe('chunked blobs', () => {
  it('the migration keeps inline blobs and their upload rows; a big old blob still reads by range', () => {
    const db = dbAt(13);
    db.prepare(
      "INSERT INTO principals (id, name, roles, created_at, token_hash) VALUES ('p1', 'alice', '[\"submitter\"]', 0, ?)",
    ).run('0'.repeat(64));
    const small = Buffer.from('print(1)\n');
    const big = Buffer.alloc(3 * BLOB_CHUNK_BYTES + 5, 7);
    big.write('start');
    for (const b of [small, big]) {
      db.prepare('INSERT INTO blobs (sha256, size, content, created_at) VALUES (?, ?, ?, 1)').run(
        sha(b),
        b.length,
        b,
      );
      db.prepare("INSERT INTO blob_uploads (principal_id, sha256, uploaded_at) VALUES ('p1', ?, 2)").run(
        sha(b),
      );
    }
    migrate(db);
    const repo = new BlobsRepo(db);
    expect(repo.contentUploadedBy('p1', sha(small))?.equals(small)).toBe(true);
    expect(repo.contentUploadedBy('p1', sha(big))?.equals(big)).toBe(true);
    expect(repo.rangeUploadedBy('p1', sha(big), 0, 5)?.toString()).toBe('start');
    expect(repo.bytesOf('p1')).toBe(small.length + big.length);
    // The upload rows still hold their blobs (the cascade did not fire).
    expect(repo.uploadedBy('p1', sha(big))).toBe(true);
    db.close();
  });

  it('put, pieces and ranges agree with the bytes for any size and any range (property)', () => {
    const db = dbAt(999);
    db.prepare(
      "INSERT INTO principals (id, name, roles, created_at, token_hash) VALUES ('p1', 'alice', '[\"submitter\"]', 0, ?)",
    ).run('0'.repeat(64));
    const repo = new BlobsRepo(db);
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 3 * BLOB_CHUNK_BYTES + 17 }),
        fc.integer({ min: 1, max: 700_000 }),
        fc.nat(),
        fc.nat(),
        (size, pieceLen, a, b) => {
          const content = Buffer.alloc(size);
          for (let i = 0; i + 4 <= size; i += 4096) content.writeUInt32LE((i ^ size) >>> 0, i);
          const digest = sha(content);
          // Pieces of any length, as a temporary file is read.
          const pieces: Buffer[] = [];
          for (let at = 0; at < size; at += pieceLen) pieces.push(content.subarray(at, at + pieceLen));
          repo.putChunks(digest, size, pieces, 1);
          repo.recordUpload('p1', digest, 1);
          expect(Buffer.concat([...(repo.piecesUploadedBy('p1', digest) ?? [])]).equals(content)).toBe(true);
          const start = size === 0 ? 0 : a % size;
          const length = size === 0 ? 0 : b % (size - start + 1);
          const range = repo.rangeUploadedBy('p1', digest, start, length);
          expect(range?.equals(content.subarray(start, start + length))).toBe(true);
          const chunks = (
            db.prepare('SELECT count(*) AS n FROM blob_chunks WHERE sha256 = ?').get(digest) as { n: number }
          ).n;
          expect(chunks).toBe(size > BLOB_CHUNK_BYTES ? Math.ceil(size / BLOB_CHUNK_BYTES) : 0);
        },
      ),
      { numRuns: 25 },
    );
    db.close();
  });

  it('pieces that do not add up to the declared size are refused', () => {
    const db = dbAt(999);
    const repo = new BlobsRepo(db);
    const content = Buffer.alloc(BLOB_CHUNK_BYTES * 2);
    expect(() =>
      db.transaction(() => repo.putChunks(sha(content), content.length + 1, [content], 1))(),
    ).toThrow(/bytes, not/);
    expect(() => db.transaction(() => repo.putChunks('a'.repeat(64), 10, [Buffer.alloc(9)], 1))()).toThrow(
      /bytes, not/,
    );
    expect(db.prepare('SELECT count(*) AS n FROM blobs').get()).toEqual({ n: 0 });
    expect(db.prepare('SELECT count(*) AS n FROM blob_chunks').get()).toEqual({ n: 0 });
    db.close();
  });
});
