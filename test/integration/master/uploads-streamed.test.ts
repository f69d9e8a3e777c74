import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import {
  errorCode,
  openRaw,
  type RawConnection,
  type RawResponse,
  requestHead,
} from '../../support/raw-http.js';
import { waitFor } from '../../support/wait.js';

/**
 * docs/performance.md "Noisy neighbours" (and the upload half of item 6) with a real master on loopback: `PUT
 * /api/v1/blobs/{sha256}` checks Content-Length, quota, uploads in flight and free space before it
 * reads a byte, streams the body through a hash into a temporary file, and a wrong digest costs the
 * master no memory beyond a stream buffer. Plain HTTP (TLS off) so a raw socket can play the client.
 */

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');
const WRONG = 'f'.repeat(64);

let m: TestMaster;
let free = 100 * GiB;

beforeAll(async () => {
  m = await startTestMaster({
    config: {
      tls: { mode: 'off' },
      policy: { max_input_bytes: 256 * MiB, input_quota_bytes: 210 * MiB },
      storage: { min_free_bytes: 100 * MiB, warn_free_bytes: 100 * MiB, check_interval_ms: 3_600_000 },
      // Unpaced here (the RSS case streams 1.6 GiB); pacing has its own master below.
      http: { max_uploads_per_principal: 4, upload_bytes_per_second_per_principal: 0 },
    },
    statfs: async () => ({ free_bytes: free, total_bytes: 200 * GiB }),
  });
});

afterAll(async () => {
  await m?.close();
});

/** The head of a raw `PUT /api/v1/blobs/{digest}` declaring `length` body bytes. */
const putHead = (token: string, digest: string, length: number, extra: Record<string, string> = {}) =>
  requestHead('PUT', `/api/v1/blobs/${digest}`, {
    authorization: `Bearer ${token}`,
    'content-length': length,
    ...extra,
  });

/** PUTs `body` whole under its sha256 on a raw connection to `url`; the answer (the connection is closed). */
async function putWhole(url: string, token: string, body: Buffer): Promise<RawResponse> {
  const c = await openRaw(url);
  try {
    c.socket.write(putHead(token, sha(body), body.length));
    c.socket.write(body);
    return await c.response;
  } finally {
    c.socket.destroy();
  }
}

interface Answer {
  status: number;
  body: { error?: { code: string; retryable?: boolean }; stored?: boolean; size?: number };
}

/**
 * PUTs `total` bytes (a 1 MiB pattern repeated, so the client holds 1 MiB) under `digest`, with
 * backpressure; `onStart` runs once the headers went out.
 */
function streamUpload(
  token: string,
  digest: string,
  total: number,
  pattern = Buffer.alloc(MiB, 7),
): Promise<Answer> {
  const { hostname, port } = new URL(m.url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: hostname,
        port: Number(port),
        method: 'PUT',
        path: `/api/v1/blobs/${digest}`,
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/octet-stream',
          'content-length': total,
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => {
          text += c.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text || '{}') }));
      },
    );
    req.on('error', reject);
    let sent = 0;
    const pump = () => {
      while (sent < total) {
        const n = Math.min(pattern.length, total - sent);
        sent += n;
        if (!req.write(n === pattern.length ? pattern : pattern.subarray(0, n))) {
          req.once('drain', pump);
          return;
        }
      }
      req.end();
    };
    pump();
  });
}

/** The digest of `total` bytes of the repeated pattern. */
function patternDigest(total: number, pattern = Buffer.alloc(MiB, 7)): string {
  const h = createHash('sha256');
  for (let sent = 0; sent < total; sent += pattern.length)
    h.update(pattern.subarray(0, Math.min(pattern.length, total - sent)));
  return h.digest('hex');
}

const uploadDir = () => join(m.dataDir, 'uploads');

describe('refused before a byte of the body is read', () => {
  it('an oversize Content-Length is 413 PAYLOAD_TOO_LARGE and the connection closes', async () => {
    const token = m.createToken('oscar', ['submitter']);
    const c = await openRaw(m.url);
    c.socket.write(
      requestHead('PUT', `/api/v1/blobs/${WRONG}`, {
        authorization: `Bearer ${token}`,
        'content-type': 'application/octet-stream',
        'content-length': 10 * GiB,
      }),
    );
    const r = await c.response;
    expect(r.status).toBe(413);
    expect(errorCode(r)).toBe('PAYLOAD_TOO_LARGE');
    expect(r.headers['connection']).toBe('close');
    await c.closed; // no body was sent, and none is waited for
  });

  it('no Content-Length (chunked) is INVALID_INPUT', async () => {
    const token = m.createToken('chuck', ['submitter']);
    const c = await openRaw(m.url);
    c.socket.write(
      requestHead('PUT', `/api/v1/blobs/${WRONG}`, {
        authorization: `Bearer ${token}`,
        'content-type': 'application/octet-stream',
        'transfer-encoding': 'chunked',
      }),
    );
    const r = await c.response;
    expect(r.status).toBe(400);
    expect(errorCode(r)).toBe('INVALID_INPUT');
    await c.closed;
  });

  it('over the quota is 429 QUOTA_EXCEEDED, declared size alone', async () => {
    const token = m.createToken('quinn', ['submitter']);
    // quinn already holds 20 MiB of 210 (a row whose size says so: the quota counts sizes).
    const quinn = m.store.db.prepare("SELECT id FROM principals WHERE name = 'quinn'").get() as {
      id: string;
    };
    const held = 'e'.repeat(64);
    m.store.db
      .prepare('INSERT INTO blobs (sha256, size, content, created_at) VALUES (?, ?, zeroblob(?), ?)')
      .run(held, 20 * MiB, 20 * MiB, Date.now());
    m.store.blobs.recordUpload(quinn.id, held, Date.now());
    const c2 = await openRaw(m.url);
    c2.socket.write(putHead(token, WRONG, 200 * MiB));
    const r = await c2.response;
    expect(r.status).toBe(429);
    expect(errorCode(r)).toBe('QUOTA_EXCEEDED');
    await c2.closed;
  });

  it('uploads in flight count against the quota: parallel uploads cannot together pass it', async () => {
    const token = m.createToken('pia', ['submitter']);
    const first = await openRaw(m.url);
    first.socket.write(putHead(token, WRONG, 150 * MiB));
    first.socket.write(Buffer.alloc(1000));
    await waitFor(() => readdirSync(uploadDir()).length >= 1, { what: 'the first upload streaming' });
    const second = await openRaw(m.url);
    second.socket.write(putHead(token, WRONG, 100 * MiB));
    const r = await second.response;
    expect(errorCode(r)).toBe('QUOTA_EXCEEDED'); // 150 + 100 MiB > 210 MiB, nothing stored yet
    first.socket.destroy();
    await waitFor(() => readdirSync(uploadDir()).length === 0, { what: 'the first upload gone' });
  });

  it('a principal’s uploads in flight are capped: the next one is 429 TOO_MANY_UPLOADS, retryable', async () => {
    const token = m.createToken('tina', ['submitter']);
    const held = await Promise.all(
      [0, 1, 2, 3].map(async () => {
        const c = await openRaw(m.url);
        c.socket.write(putHead(token, WRONG, MiB));
        c.socket.write(Buffer.alloc(1000));
        return c;
      }),
    );
    await waitFor(() => readdirSync(uploadDir()).length >= 4, { what: 'four uploads streaming' });
    const c = await openRaw(m.url);
    c.socket.write(putHead(token, WRONG, MiB));
    const r = await c.response;
    expect(r.status).toBe(429);
    expect(JSON.parse(r.body).error).toMatchObject({ code: 'TOO_MANY_UPLOADS', retryable: true });
    // Another principal is not held up by tina's uploads.
    const other = await streamUpload(
      m.createToken('uma', ['submitter']),
      sha(Buffer.alloc(10, 1)),
      10,
      Buffer.alloc(10, 1),
    );
    expect(other.status).toBe(200);
    for (const h of held) h.socket.destroy();
    // Aborted uploads leave nothing behind and give their slots back.
    await waitFor(() => readdirSync(uploadDir()).length === 0, { what: 'temporary files removed' });
    const again = await streamUpload(token, sha(Buffer.alloc(10, 2)), 10, Buffer.alloc(10, 2));
    expect(again.status).toBe(200);
  });
});

describe('streamed', () => {
  it('a wrong digest is DIGEST_MISMATCH, stores nothing and removes the temporary file', async () => {
    const token = m.createToken('dora', ['submitter']);
    const r = await streamUpload(token, WRONG, 3 * MiB);
    expect(r.status).toBe(400);
    expect(r.body.error?.code).toBe('DIGEST_MISMATCH');
    expect(m.store.blobs.meta(WRONG)).toBeUndefined();
    expect(readdirSync(uploadDir())).toEqual([]);
    expect(m.master.storage.reservedBytes()).toBe(0);
  });

  it('8 concurrent 200 MiB uploads with a wrong digest keep the master’s RSS bounded', async () => {
    // One upload each: the quota counts uploads in flight, and 210 MiB holds one 200 MiB upload.
    const tokens = Array.from({ length: 8 }, (_, i) => m.createToken(`rss-${i}`, ['submitter']));
    global.gc?.();
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 50);
    try {
      const answers = await Promise.all(
        Array.from({ length: 8 }, (_, i) => streamUpload(tokens[i]!, WRONG, 200 * MiB)),
      );
      for (const a of answers) expect(a.body.error?.code).toBe('DIGEST_MISMATCH');
    } finally {
      clearInterval(sampler);
    }
    const grew = (peak - before) / MiB;
    console.log(`RSS before ${Math.round(before / MiB)} MiB, peak +${Math.round(grew)} MiB over 8 × 200 MiB`);
    // Buffered whole, this was +1.6 GiB and more; streamed, it is stream buffers.
    expect(grew).toBeLessThan(300);
    expect(readdirSync(uploadDir())).toEqual([]);
  }, 120_000);

  it('body pieces are written to the file in runs: stored exactly, in order, at any size', async () => {
    const token = m.createToken('rhea', ['submitter']);
    const owner = m.store.principals.findByName('rhea')!.id;
    // Random bytes (a reordered or dropped run would change them); one size under a write run, one
    // over several runs with a tail, one exactly a run.
    for (const total of [1000, 3 * MiB + 12_345, 256 * 1024]) {
      const pattern = randomBytes(total);
      const digest = createHash('sha256').update(pattern).digest('hex');
      const r = await streamUpload(token, digest, total, pattern);
      expect(r).toMatchObject({ status: 200, body: { size: total, stored: true } });
      expect(m.store.blobs.contentUploadedBy(owner, digest)?.equals(pattern)).toBe(true);
    }
  });

  it('a right digest is stored and answered as before', async () => {
    const token = m.createToken('rita', ['submitter']);
    const total = 5 * MiB + 17;
    const r = await streamUpload(token, patternDigest(total), total);
    expect(r).toMatchObject({ status: 200, body: { size: total, stored: true } });
    expect(m.store.blobs.meta(patternDigest(total))?.size).toBe(total);
    expect(m.master.storage.reservedBytes()).toBe(0);
  });
});

describe('storage reserved, not sampled', () => {
  it('concurrent uploads cannot together overshoot the free-space floor', async () => {
    // 100 MiB floor; 160 MiB free: room for one 20 MiB upload (3 × 20 MiB reserved), not two.
    free = 160 * MiB;
    await m.master.storage.check();
    const token = m.createToken('fred', ['submitter']);
    const first = await openRaw(m.url);
    first.socket.write(putHead(token, WRONG, 20 * MiB));
    first.socket.write(Buffer.alloc(1000));
    await waitFor(() => m.master.storage.reservedBytes() === 60 * MiB, { what: 'the first reservation' });
    const second = await openRaw(m.url);
    second.socket.write(putHead(token, WRONG, 20 * MiB));
    const r = await second.response;
    expect(r.status).toBe(503);
    expect(JSON.parse(r.body).error).toMatchObject({ code: 'UNAVAILABLE', retryable: true });
    expect(JSON.parse(r.body).error.message).toContain('reserved by writes in flight');
    first.socket.destroy();
    await waitFor(() => m.master.storage.reservedBytes() === 0, { what: 'the reservation released' });
    // Health is unaffected by reservations: the disk itself is above the floor.
    expect(m.master.storage.acceptsGrowth()).toBe(true);
    free = 100 * GiB;
    await m.master.storage.check();
  });
});

describe('a principal’s uploads are paced to its byte rate (http.upload_bytes_per_second_per_principal)', () => {
  it('a body past the rate is slowed, not refused or buffered: stored exactly, no sooner than the rate allows', async () => {
    // 1 MiB/s: a 3 MiB body has 1 MiB of burst, then owes 2 MiB, i.e. at least ~2 s at the rate.
    const paced = await startTestMaster({
      config: {
        tls: { mode: 'off' },
        policy: { max_input_bytes: 64 * MiB, input_quota_bytes: 64 * MiB },
        http: { max_uploads_per_principal: 4, upload_bytes_per_second_per_principal: MiB },
      },
    });
    const outer = m;
    try {
      m = paced;
      const total = 3 * MiB;
      const started = Date.now();
      const r = await streamUpload(paced.createToken('pat', ['submitter']), patternDigest(total), total);
      const took = Date.now() - started;
      expect(r).toMatchObject({ status: 200, body: { size: total, stored: true } });
      expect(paced.store.blobs.meta(patternDigest(total))?.size).toBe(total);
      // A lower bound (the limiter's arithmetic), never an upper one: a slow machine only adds to it.
      expect(took).toBeGreaterThanOrEqual(1500);
    } finally {
      m = outer;
      await paced.close();
    }
  }, 30_000);
});

describe('every end of an upload gives back what it held (slot, disk reservation, temporary file)', () => {
  let cutM: TestMaster;
  beforeAll(async () => {
    cutM = await startTestMaster({
      config: {
        tls: { mode: 'off' },
        policy: { max_input_bytes: 64 * MiB, input_quota_bytes: 64 * MiB },
        storage: { min_free_bytes: MiB, warn_free_bytes: MiB, check_interval_ms: 3_600_000 },
        http: {
          max_uploads_per_principal: 1,
          body_timeout_ms: 500,
          upload_bytes_per_second_per_principal: 0,
        },
      },
    });
  });
  afterAll(async () => {
    await cutM?.close();
  });
  const uploads = () => readdirSync(join(cutM.dataDir, 'uploads'));

  it('an upload cut as stalled (408) releases its slot, reservation and file: the same principal uploads again', async () => {
    // Node does not end a request whose socket closes after its answer was written: the cut itself must.
    const token = cutM.createToken('stella', ['submitter']);
    const c = await openRaw(cutM.url);
    c.socket.write(putHead(token, WRONG, 8 * MiB));
    c.socket.write(Buffer.alloc(10 * 1024)); // then nothing: a network stall, or on purpose
    const r = await c.response;
    expect(r.status).toBe(408);
    expect(errorCode(r)).toBe('REQUEST_TIMEOUT');
    await c.closed;
    await waitFor(() => cutM.master.storage.reservedBytes() === 0 && uploads().length === 0, {
      what: 'the cut upload released',
    });
    // One upload per principal here: a slot still held would make this 429 TOO_MANY_UPLOADS.
    const body = Buffer.from('after the stall');
    expect((await putWhole(cutM.url, token, body)).status).toBe(200);
  });

  it('a blob already owned, PUT again at another size, counts against the quota like a new one', async () => {
    const token = cutM.createToken('rex', ['submitter']);
    const body = Buffer.from('owned');
    expect((await putWhole(cutM.url, token, body)).status).toBe(200);
    // 64 MiB quota: a re-PUT declaring the whole quota is refused before a byte is read.
    const big = await openRaw(cutM.url);
    big.socket.write(putHead(token, sha(body), 64 * MiB));
    const r = await big.response;
    expect(errorCode(r)).toBe('QUOTA_EXCEEDED');
    big.socket.destroy();
    // At its own size it stores nothing new: admitted.
    expect((await putWhole(cutM.url, token, body)).status).toBe(200);
  });

  it('the master failing to write the upload is UNAVAILABLE (not the client’s short body), and releases', async () => {
    const token = cutM.createToken('walt', ['submitter']);
    const dir = join(cutM.dataDir, 'uploads');
    rmSync(dir, { recursive: true, force: true });
    writeFileSync(dir, 'not a directory');
    try {
      const body = Buffer.from('cannot land');
      const r = await putWhole(cutM.url, token, body);
      expect(r.status).toBe(503);
      expect(JSON.parse(r.body).error).toMatchObject({ code: 'UNAVAILABLE', retryable: true });
      expect(JSON.parse(r.body).error.message).toContain('could not write the upload: ENOTDIR');
      expect(cutM.master.storage.reservedBytes()).toBe(0);
    } finally {
      rmSync(dir, { force: true });
      mkdirSync(dir, { mode: 0o700 });
    }
  });
});

describe('Expect: 100-continue is answered by the route, after its checks (Node would answer it first)', () => {
  /** Everything the master sent on `c`, as text. */
  function received(c: RawConnection): () => string {
    let text = '';
    c.socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
    });
    return () => text;
  }

  it('a refused upload is answered at once, with no 100 Continue to invite its body', async () => {
    const token = m.createToken('eve-continue', ['submitter']);
    for (const [length, status] of [
      [300 * MiB, 413], // over policy.max_input_bytes
      [220 * MiB, 429], // over the quota
    ] as const) {
      const c = await openRaw(m.url);
      const got = received(c);
      c.socket.write(putHead(token, WRONG, length, { expect: '100-continue' }));
      const r = await c.response;
      expect(r.status).toBe(status);
      expect(got()).not.toContain('100 Continue');
      c.socket.destroy();
    }
  });

  it('an admitted upload gets 100 Continue, then its body is read and stored', async () => {
    const token = m.createToken('cora', ['submitter']);
    const body = Buffer.from('sent after 100 Continue');
    const c = await openRaw(m.url);
    const got = received(c);
    c.socket.write(putHead(token, sha(body), body.length, { expect: '100-continue' }));
    await waitFor(() => got().startsWith('HTTP/1.1 100 Continue\r\n'), { what: '100 Continue' });
    c.socket.write(body);
    await waitFor(() => /HTTP\/1\.1 200 /.test(got()), { what: 'the final answer' });
    expect(m.store.blobs.meta(sha(body))?.size).toBe(body.length);
    c.socket.destroy();
  });

  it('a JSON route sends 100 Continue when it starts reading; without a token there is none', async () => {
    const token = m.createToken('jay', ['submitter']);
    const body = JSON.stringify({ spec: { nonsense: true } });
    const head = (bearer: string | null) =>
      requestHead('POST', '/api/v1/proposals', {
        ...(bearer === null ? {} : { authorization: `Bearer ${bearer}` }),
        'content-type': 'application/json',
        'idempotency-key': m.key(),
        'content-length': body.length,
        expect: '100-continue',
      });
    const c = await openRaw(m.url);
    const got = received(c);
    c.socket.write(head(token));
    await waitFor(() => got().startsWith('HTTP/1.1 100 Continue\r\n'), { what: '100 Continue' });
    c.socket.write(body);
    await waitFor(() => /HTTP\/1\.1 400 /.test(got()), { what: 'the schema’s answer' });
    c.socket.destroy();
    const anon = await openRaw(m.url);
    const anonGot = received(anon);
    anon.socket.write(head(null));
    expect((await anon.response).status).toBe(401);
    expect(anonGot()).not.toContain('100 Continue');
    anon.socket.destroy();
  });
});
