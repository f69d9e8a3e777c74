import { X509Certificate } from 'node:crypto';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createCaTrustingFetch, ensureDevTls } from '../../../src/platform/tls.js';
import { requireOrSkip } from '../../support/require-or-skip.js';

let dataDir: string;
const servers: Server[] = [];

beforeEach(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'gpu-broker-tls-'));
});

afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  await rm(dataDir, { recursive: true, force: true });
});

async function serve(cert: string, key: string, host = '127.0.0.1'): Promise<number> {
  const server = createServer({ cert, key }, (_req, res) => res.end('ok'));
  servers.push(server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, resolve);
  });
  return (server.address() as AddressInfo).port;
}

describe('ensureDevTls', () => {
  it('generates a CA and a server cert that a client trusting ca.pem accepts and others refuse', async () => {
    const tls = await ensureDevTls(dataDir, {});
    expect(tls.generated).toEqual({ ca: true, server: true });
    const port = await serve(tls.cert, tls.key);

    const trusting = createCaTrustingFetch(tls.ca);
    try {
      const res = await trusting.fetch(`https://127.0.0.1:${port}/`);
      expect(await res.text()).toBe('ok');
      const byName = await trusting.fetch(`https://localhost:${port}/`);
      expect(byName.status).toBe(200);
    } finally {
      await trusting.close();
    }

    // Global fetch trusts only the public roots (NODE_EXTRA_CA_CERTS is not set for the test runner).
    const refused = await fetch(`https://127.0.0.1:${port}/`).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(TypeError);
    expect(((refused as Error).cause as { code?: string }).code).toMatch(/UNABLE_TO_VERIFY|SELF_SIGNED|CERT/);
  });

  it('writes the expected files, keys with mode 0600, and a sha256 ECDSA server cert for serverAuth', async () => {
    const tls = await ensureDevTls(dataDir, {});
    expect(tls.caCertPath).toBe(join(dataDir, 'tls', 'ca.pem'));
    expect(tls.certPath).toBe(join(dataDir, 'tls', 'server.pem'));
    expect(tls.keyPath).toBe(join(dataDir, 'tls', 'server-key.pem'));
    expect((await stat(join(dataDir, 'tls', 'ca-key.pem'))).mode & 0o777).toBe(0o600);
    expect((await stat(tls.keyPath)).mode & 0o777).toBe(0o600);
    expect(tls.ca).not.toContain('PRIVATE KEY');

    const ca = new X509Certificate(tls.ca);
    const cert = new X509Certificate(tls.cert);
    expect(ca.ca).toBe(true);
    expect(cert.ca).toBe(false);
    expect(cert.verify(ca.publicKey)).toBe(true);
    expect(cert.publicKey.asymmetricKeyDetails?.namedCurve).toBe('prime256v1');
    expect(cert.keyUsage).toEqual(['1.3.6.1.5.5.7.3.1']);
    expect(cert.checkHost('localhost')).toBe('localhost');
    expect(cert.checkIP('127.0.0.1')).toBe('127.0.0.1');
    expect(cert.checkIP('::1')).toBeDefined();
    // ecdsa-with-SHA256
    expect(cert.toLegacyObject().asn1Curve).toBe('prime256v1');
    expect(cert.raw.includes(Buffer.from('2a8648ce3d040302', 'hex'))).toBe(true);
  });

  it('reuses existing files on later calls', async () => {
    const first = await ensureDevTls(dataDir, { sans: ['gpu-host.example'] });
    const second = await ensureDevTls(dataDir, { sans: ['gpu-host.example'] });
    expect(second.generated).toEqual({ ca: false, server: false });
    expect(second.ca).toBe(first.ca);
    expect(second.cert).toBe(first.cert);
    expect(second.key).toBe(first.key);
  });

  it('re-issues only the server cert, from the same CA, when a requested SAN is missing', async () => {
    const first = await ensureDevTls(dataDir, {});
    const second = await ensureDevTls(dataDir, { sans: ['gpu-host.example', '10.1.2.3', '[fd00::7]'] });
    expect(second.generated).toEqual({ ca: false, server: true });
    expect(second.ca).toBe(first.ca);
    expect(second.cert).not.toBe(first.cert);
    const cert = new X509Certificate(second.cert);
    expect(cert.verify(new X509Certificate(first.ca).publicKey)).toBe(true);
    expect(cert.checkHost('gpu-host.example')).toBe('gpu-host.example');
    expect(cert.checkIP('10.1.2.3')).toBe('10.1.2.3');
    expect(cert.checkIP('fd00::7')).toBeDefined();
    expect(cert.checkHost('localhost')).toBe('localhost');
    // An IP literal is an IP SAN, not a DNS name.
    expect(cert.subjectAltName).toContain('IP Address:10.1.2.3');
    expect(cert.subjectAltName).not.toContain('DNS:10.1.2.3');

    // A subset of the covered names needs no new certificate.
    const third = await ensureDevTls(dataDir, { sans: ['10.1.2.3'] });
    expect(third.generated).toEqual({ ca: false, server: false });
    expect(third.cert).toBe(second.cert);
  });

  it('re-issues a server cert close to expiry and replaces an unreadable one', async () => {
    const now = new Date('2030-01-01T00:00:00Z');
    const first = await ensureDevTls(dataDir, { now });
    const later = await ensureDevTls(dataDir, { now: new Date(now.getTime() + 380 * 86_400_000) });
    expect(later.generated).toEqual({ ca: false, server: true });
    expect(later.ca).toBe(first.ca);

    await writeFile(later.certPath, 'garbage');
    const repaired = await ensureDevTls(dataDir, { now });
    expect(repaired.generated).toEqual({ ca: false, server: true });
    expect(new X509Certificate(repaired.cert).verify(new X509Certificate(first.ca).publicKey)).toBe(true);
  });

  it('serves an extra IP SAN over real TLS', async (ctx) => {
    const tls = await ensureDevTls(dataDir, { sans: ['::1'] });
    const port = await serve(tls.cert, tls.key, '::1').catch(() => undefined);
    if (!requireOrSkip('an IPv6 loopback (::1)', port !== undefined) || port === undefined) return ctx.skip();
    const trusting = createCaTrustingFetch(tls.ca);
    try {
      expect((await trusting.fetch(`https://[::1]:${port}/`)).status).toBe(200);
    } finally {
      await trusting.close();
    }
  });
});
