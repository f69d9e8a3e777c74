import { createHash, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type BrowserContext, chromium } from 'playwright-core';
import { makeTempDir, removeTempDir } from '../support/temp.js';

/**
 * Debian's chromium driven by playwright-core (stack-notes: launchPersistentContext with the system
 * binary). Chromium ignores NODE_EXTRA_CA_CERTS, so instead of turning certificate checks off the
 * master's own leaf certificate is pinned by the sha256 of its public key.
 */

/** Where Debian installs chromium (scripts/ensure-test-deps.sh installs it for the tests). */
export const CHROMIUM_PATH = '/usr/bin/chromium';

const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-quic',
];

/** base64 sha256 of a certificate's SubjectPublicKeyInfo (DER), as chromium's SPKI pin list wants it. */
export function spkiPin(certPem: string): string {
  const der = new X509Certificate(certPem).publicKey.export({ type: 'spki', format: 'der' });
  return createHash('sha256').update(der).digest('base64');
}

/** A headless chromium that trusts the test master's leaf certificate (under `<dataDir>/tls`). */
export interface Browser {
  context: BrowserContext;
  close(): Promise<void>;
}

/** Launches chromium with a fresh profile; `masterDataDir` holds the master's `tls/server.pem`. */
export async function launchBrowser(masterDataDir: string | null): Promise<Browser> {
  const profile = makeTempDir('chromium');
  const pin = masterDataDir ? spkiPin(readFileSync(join(masterDataDir, 'tls', 'server.pem'), 'utf8')) : null;
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: [...FLAGS, ...(pin ? [`--ignore-certificate-errors-spki-list=${pin}`] : [])],
    viewport: { width: 1440, height: 1000 },
    deviceScaleFactor: 1,
  });
  return {
    context,
    async close() {
      await context.close();
      removeTempDir(profile);
    },
  };
}
