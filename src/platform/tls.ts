// reflect-metadata must load before @peculiar/x509: v2 dropped its own Reflect polyfill and
// fails at import time ("tsyringe requires a reflect polyfill") without it.
import 'reflect-metadata';
import { createPrivateKey, X509Certificate as NodeX509, randomBytes, webcrypto } from 'node:crypto';
import { chmod, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';

// Kept apart so the stdio bridge bundle does not carry the certificate code; re-exported for callers.
export { createCaTrustingFetch } from './ca-fetch.js';

/**
 * Development TLS for the master (docs/operations.md "TLS": TLS by default). A private ECDSA P-256 CA and one
 * server certificate live in `<dataDir>/tls/`. The CA is generated once and kept, so agents and workers that
 * were given `ca.pem` keep trusting the master when the server certificate is re-issued (new SANs, close to
 * expiry). Private keys are written with mode 0600 and never leave this directory.
 */

/** Paths and PEM contents of the dev CA and the server certificate. */
export interface DevTls {
  /** `<dataDir>/tls/ca.pem`: what clients trust (NODE_EXTRA_CA_CERTS, `--ca-file`, the client kit). */
  caCertPath: string;
  /** `<dataDir>/tls/server.pem`: the master's certificate. */
  certPath: string;
  /** `<dataDir>/tls/server-key.pem`: the master's private key (mode 0600). */
  keyPath: string;
  /** PEM of the CA certificate. */
  ca: string;
  /** PEM of the server certificate. */
  cert: string;
  /** PEM (PKCS#8) of the server private key. */
  key: string;
  /** What this call had to create: a new CA (clients must be given the new ca.pem) and/or a server cert. */
  generated: { ca: boolean; server: boolean };
}

/** Options of {@link ensureDevTls}. */
export interface EnsureDevTlsOptions {
  /** Extra names the server certificate must cover: IPv4/IPv6 literals become IP SANs, others DNS. */
  sans?: string[];
  /** The current time; tests pass a fixed one to exercise expiry. */
  now?: Date;
}

/** Names every dev server certificate covers, whatever the caller asks for. */
const DEFAULT_SANS = ['localhost', '127.0.0.1', '::1'];
const CA_VALID_DAYS = 3650;
const SERVER_VALID_DAYS = 397;
/** A server certificate this close to expiry is re-issued at start rather than left to lapse mid-run. */
const RENEW_BEFORE_DAYS = 30;
const DAY_MS = 86_400_000;

const EC_KEY_ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGNING_ALGORITHM = { name: 'ECDSA', hash: 'SHA-256' } as const;

/**
 * Returns the dev CA and a server certificate covering localhost, 127.0.0.1, ::1 and `opts.sans`,
 * creating them on first use and re-issuing the server certificate (from the same CA) when it is
 * missing, unreadable, not signed by the CA, close to expiry, or lacks a requested name.
 * A missing or unreadable CA key means a new CA: the result's `generated.ca` says so.
 */
export async function ensureDevTls(dataDir: string, opts: EnsureDevTlsOptions = {}): Promise<DevTls> {
  const now = opts.now ?? new Date();
  const dir = join(dataDir, 'tls');
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const paths = {
    caCert: join(dir, 'ca.pem'),
    caKey: join(dir, 'ca-key.pem'),
    cert: join(dir, 'server.pem'),
    key: join(dir, 'server-key.pem'),
  };
  const sans = uniqueSans([...DEFAULT_SANS, ...(opts.sans ?? [])]);

  let ca = await loadCa(paths.caCert, paths.caKey, now);
  const generated = { ca: false, server: false };
  if (!ca) {
    ca = await createCa(now);
    await writePrivate(paths.caKey, ca.keyPem);
    await writePublic(paths.caCert, ca.certPem);
    generated.ca = true;
  }

  let server = generated.ca ? undefined : await loadServer(paths.cert, paths.key, ca.certPem, sans, now);
  if (!server) {
    server = await createServerCert(ca, sans, now);
    await writePrivate(paths.key, server.keyPem);
    await writePublic(paths.cert, server.certPem);
    generated.server = true;
  }

  return {
    caCertPath: paths.caCert,
    certPath: paths.cert,
    keyPath: paths.key,
    ca: ca.certPem,
    cert: server.certPem,
    key: server.keyPem,
    generated,
  };
}

interface KeyedCert {
  certPem: string;
  keyPem: string;
  cert: x509.X509Certificate;
  keys: webcrypto.CryptoKeyPair;
}

interface IssuedCert {
  certPem: string;
  keyPem: string;
}

async function loadCa(certPath: string, keyPath: string, now: Date): Promise<KeyedCert | undefined> {
  const [certPem, keyPem] = await Promise.all([readIfExists(certPath), readIfExists(keyPath)]);
  if (certPem === undefined || keyPem === undefined) return undefined;
  try {
    const nodeCert = new NodeX509(certPem);
    if (!nodeCert.ca || new Date(nodeCert.validTo).getTime() <= now.getTime()) return undefined;
    const privateKey = await webcrypto.subtle.importKey('pkcs8', pemBody(keyPem), EC_KEY_ALGORITHM, true, [
      'sign',
    ]);
    const cert = new x509.X509Certificate(certPem);
    const publicKey = await cert.publicKey.export(EC_KEY_ALGORITHM, ['verify']);
    return { certPem, keyPem, cert, keys: { privateKey, publicKey } };
  } catch {
    // A corrupt or foreign CA file is replaced rather than crashing the master at start; the caller
    // reports `generated.ca` so the operator knows clients need the new ca.pem.
    return undefined;
  }
}

async function loadServer(
  certPath: string,
  keyPath: string,
  caPem: string,
  sans: string[],
  now: Date,
): Promise<IssuedCert | undefined> {
  const [certPem, keyPem] = await Promise.all([readIfExists(certPath), readIfExists(keyPath)]);
  if (certPem === undefined || keyPem === undefined) return undefined;
  try {
    const cert = new NodeX509(certPem);
    const caCert = new NodeX509(caPem);
    if (!cert.verify(caCert.publicKey)) return undefined;
    if (new Date(cert.validTo).getTime() - now.getTime() < RENEW_BEFORE_DAYS * DAY_MS) return undefined;
    if (!sans.every((name) => coversName(cert, name))) return undefined;
    if (!cert.checkPrivateKey(createPrivateKey(keyPem))) return undefined;
    return { certPem, keyPem };
  } catch {
    return undefined;
  }
}

function coversName(cert: NodeX509, name: string): boolean {
  if (isIP(name)) return cert.checkIP(name) !== undefined;
  // `subject: 'never'`: only SANs count, as browsers and Node's TLS do for certificates that have them.
  return cert.checkHost(name, { subject: 'never', wildcards: false }) !== undefined;
}

async function createCa(now: Date): Promise<KeyedCert> {
  const keys = (await webcrypto.subtle.generateKey(EC_KEY_ALGORITHM, true, [
    'sign',
    'verify',
  ])) as webcrypto.CryptoKeyPair;
  // A random suffix keeps two dev CAs (two data dirs, two machines) distinguishable in trust stores.
  const name = `CN=gpu-broker dev CA ${randomBytes(4).toString('hex')}, O=gpu-broker`;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serialNumber(),
    name,
    notBefore: backdated(now),
    notAfter: new Date(now.getTime() + CA_VALID_DAYS * DAY_MS),
    signingAlgorithm: SIGNING_ALGORITHM,
    keys: keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { certPem: cert.toString('pem'), keyPem: await exportPkcs8(keys.privateKey), cert, keys };
}

async function createServerCert(ca: KeyedCert, sans: string[], now: Date): Promise<IssuedCert> {
  const keys = (await webcrypto.subtle.generateKey(EC_KEY_ALGORITHM, true, [
    'sign',
    'verify',
  ])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serialNumber(),
    subject: 'CN=gpu-broker master, O=gpu-broker',
    issuer: ca.cert.subject,
    notBefore: backdated(now),
    notAfter: new Date(now.getTime() + SERVER_VALID_DAYS * DAY_MS),
    signingAlgorithm: SIGNING_ALGORITHM,
    publicKey: keys.publicKey,
    signingKey: ca.keys.privateKey,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(
        sans.map((value) => (isIP(value) ? { type: 'ip', value } : { type: 'dns', value })),
      ),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
    ],
  });
  return { certPem: cert.toString('pem'), keyPem: await exportPkcs8(keys.privateKey) };
}

/** Trims, strips IPv6 brackets, drops empties and duplicates, keeping order (defaults first). */
function uniqueSans(names: string[]): string[] {
  const out: string[] = [];
  for (const raw of names) {
    let name = raw.trim();
    if (name.startsWith('[') && name.endsWith(']')) name = name.slice(1, -1);
    if (name === '') continue;
    if (!isIP(name)) name = name.toLowerCase();
    if (!out.includes(name)) out.push(name);
  }
  return out;
}

/** Positive 16-byte serial (RFC 5280: at most 20 octets, non-negative), as hex. */
function serialNumber(): string {
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0] ?? 0) & 0x7f;
  return bytes.toString('hex');
}

/** notBefore an hour early, so a client whose clock lags a little still accepts a fresh certificate. */
function backdated(now: Date): Date {
  return new Date(now.getTime() - 3_600_000);
}

async function exportPkcs8(key: webcrypto.CryptoKey): Promise<string> {
  const der = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', key));
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN PRIVATE KEY-----\n${lines.join('\n')}\n-----END PRIVATE KEY-----\n`;
}

function pemBody(pem: string): Buffer {
  return Buffer.from(pem.replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
}

async function readIfExists(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/**
 * Writes through a temporary file and a rename, so a crash mid-write never leaves a truncated key or
 * certificate that the next start would have to treat as corrupt. chmod after the write because
 * `mode` applies only when the file is created and is filtered by the umask.
 */
async function writeAtomic(path: string, text: string, mode: number): Promise<void> {
  const tmp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(tmp, text, { mode });
  await chmod(tmp, mode);
  await rename(tmp, path);
}

async function writePrivate(path: string, pem: string): Promise<void> {
  await writeAtomic(path, pem, 0o600);
}

async function writePublic(path: string, pem: string): Promise<void> {
  await writeAtomic(path, pem, 0o644);
}
