import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BrokerDeps } from '../broker/deps.js';
import { createPrincipal } from '../broker/principals.js';
import { BrokerError } from '../contracts/errors.js';
import {
  createPrivateFile,
  describeTightened,
  secureDataDir,
  type Tightened,
  writeSecretFile,
} from '../platform/file-modes.js';
import { Store } from '../store/store.js';

/**
 * The master's data dir: its modes (0700, secret files 0600), the store opened in it, and the token
 * files `serve` writes and the CLI reads.
 */

/** File holding the bootstrap operator token, mode 0600. */
export const OPERATOR_TOKEN_FILE = 'operator.token';

/**
 * The master's secret files, relative to its data dir: the database and its WAL, the tokens that
 * `serve` and `start` write, and the TLS private keys (tls.ts). Certificates stay as written (0644) but
 * sit in the 0700 dir.
 */
export const MASTER_SECRET_FILES = [
  'broker.db',
  'broker.db-wal',
  'broker.db-shm',
  OPERATOR_TOKEN_FILE,
  'worker.token',
  'agent.token',
  'reviewer.token',
  'tls/ca-key.pem',
  'tls/server-key.pem',
] as const;

/**
 * Makes the data dir 0700 and the secret files in it 0600 (a pre-existing 0755 dir left
 * broker.db 0644), or throws naming what it cannot tighten; returns what it changed.
 */
export function secureMasterDataDir(dataDir: string): Tightened[] {
  return secureDataDir({ dir: dataDir, dirMode: 0o700, files: MASTER_SECRET_FILES, secretDirs: ['tls'] });
}

/**
 * Opens the store in a data dir: secures the dir first (a warning through `warn` names each path
 * tightened), and creates broker.db 0600 before SQLite opens it so it and its -wal/-shm never exist
 * with a looser mode.
 */
export function openStore(dataDir: string, warn: (message: string) => void = () => undefined): Store {
  const tightened = secureMasterDataDir(dataDir);
  if (tightened.length > 0)
    warn(`data dir was readable by others; tightened ${describeTightened(tightened)}`);
  const path = join(dataDir, 'broker.db');
  createPrivateFile(path);
  return Store.open(path);
}

/** Creates the first operator on an empty database and writes its token file; no-op afterwards. */
export function bootstrapOperator(
  deps: Pick<BrokerDeps, 'store' | 'clock' | 'ids'>,
  dataDir: string,
): string | null {
  if (deps.store.principals.list().length > 0) return null;
  const { token } = createPrincipal(deps, { name: 'operator', roles: ['operator'] }, 'bootstrap');
  const path = join(dataDir, OPERATOR_TOKEN_FILE);
  writeSecretFile(path, `${token}\n`);
  return token;
}

/** Reads a token file (trimmed), with a clear error when missing. */
export function readTokenFile(path: string): string {
  if (!existsSync(path))
    throw new BrokerError(
      'NOT_FOUND',
      `token file ${path} does not exist`,
      'Create one with `gpu-broker token create`.',
    );
  return readFileSync(path, 'utf8').trim();
}
