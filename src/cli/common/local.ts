import { resolve } from 'node:path';
import { openStore } from '../../master/data-dir.js';
import { systemClock } from '../../platform/clock.js';
import { createIdGenerator } from '../../platform/ids.js';
import type { Store } from '../../store/store.js';
import type { CliIo } from './io.js';

/** The data dir: flag, then GPU_BROKER_HOME, then ./.gpu-broker. */
export function dataDirOf(values: Record<string, unknown>, io: CliIo): string {
  return resolve((values['data-dir'] as string | undefined) ?? io.env['GPU_BROKER_HOME'] ?? '.gpu-broker');
}

/** Opens the local database for an admin command; closes it afterwards. */
export async function withLocalStore<T>(
  values: Record<string, unknown>,
  io: CliIo,
  fn: (deps: {
    store: Store;
    clock: typeof systemClock;
    ids: ReturnType<typeof createIdGenerator>;
    dataDir: string;
  }) => T | Promise<T>,
): Promise<T> {
  const dataDir = dataDirOf(values, io);
  const store = openStore(dataDir, (message) => io.stderr(`warning: ${message}\n`));
  try {
    return await fn({ store, clock: systemClock, ids: createIdGenerator(), dataDir });
  } finally {
    store.close();
  }
}
