import { afterAll, describe, expect, it } from 'vitest';
import { spawnMaster } from '../../support/cli.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/** `gpu-broker serve` logs at GPU_BROKER_LOG_LEVEL, as `start` and `worker` do (default info). */

afterAll(() => removeTempDirs());

/** The pino levels of the JSON log lines on a master's stderr (the banner lines are not JSON). */
async function logLevelsOf(env: Record<string, string>): Promise<number[]> {
  const master = await spawnMaster(makeTempDir('serve-log'), [], { env, config: null });
  await master.stop();
  return master
    .stderr()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => (JSON.parse(l) as { level: number }).level);
}

describe('gpu-broker serve and GPU_BROKER_LOG_LEVEL', () => {
  it('logs info lines by default and none below the level asked for', async () => {
    expect(await logLevelsOf({})).toContain(30);
    const atError = await logLevelsOf({ GPU_BROKER_LOG_LEVEL: 'error' });
    expect(atError.filter((level) => level < 50)).toEqual([]);
  });
});
