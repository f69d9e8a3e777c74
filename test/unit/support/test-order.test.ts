import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { takeSlurmSuiteLock } from '../../support/slurm-serial.js';
import { spread } from '../../support/spread-sequencer.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';

/** The order and the lock that let the Slurm suites run beside the others (vitest.config.ts). */

afterAll(() => removeTempDirs());

describe('spread', () => {
  it('puts the first between item first and the rest evenly among the items, keeping both orders', () => {
    const items = Array.from({ length: 10 }, (_, i) => `m${i}`);
    expect(spread(items, ['s0', 's1', 's2'])).toEqual([
      's0',
      'm0',
      'm1',
      'm2',
      's1',
      'm3',
      'm4',
      'm5',
      's2',
      'm6',
      'm7',
      'm8',
      'm9',
    ]);
  });

  it('keeps every element when there are more between items than items, or none of either', () => {
    expect(spread(['m0'], ['s0', 's1', 's2'])).toEqual(['s0', 's1', 's2', 'm0']);
    expect(spread([], ['s0'])).toEqual(['s0']);
    expect(spread(['m0', 'm1'], [])).toEqual(['m0', 'm1']);
  });
});

describe('takeSlurmSuiteLock', () => {
  /** Whether another process could take the lock right now. */
  const free = (lock: string): boolean => spawnSync('flock', ['--nonblock', lock, 'true']).status === 0;

  it('holds the lock until released; a second taker gets it only then', async () => {
    const lock = join(makeTempDir('slurm-lock-'), 'lock');
    const release = await takeSlurmSuiteLock({ lock });
    expect(free(lock)).toBe(false);
    const events: string[] = [];
    const second = takeSlurmSuiteLock({ lock }).then((r) => {
      events.push('second holds');
      return r;
    });
    events.push('first releases');
    release();
    release(); // idempotent
    const releaseSecond = await second;
    expect(events).toEqual(['first releases', 'second holds']);
    expect(free(lock)).toBe(false);
    releaseSecond();
    await waitFor(() => free(lock), { what: 'the lock free after the second release' });
  });

  it('fails, naming the lock, when the holder outlives the wait', async () => {
    const lock = join(makeTempDir('slurm-lock-'), 'lock');
    const release = await takeSlurmSuiteLock({ lock });
    try {
      await expect(takeSlurmSuiteLock({ lock, timeoutS: 0 })).rejects.toThrow(lock);
    } finally {
      release();
    }
  });
});
