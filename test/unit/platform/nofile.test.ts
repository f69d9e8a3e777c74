import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { findOnPath } from '../../../src/platform/find-on-path.js';
import { raiseNofile } from '../../../src/platform/nofile.js';
import { requireOrSkip } from '../../support/require-or-skip.js';
import { waitFor } from '../../support/wait.js';

/** RLIMIT_NOFILE raised with util-linux prlimit (docs/performance.md "Noisy neighbours"), read back from the kernel. */

const prlimit = findOnPath('prlimit', '/usr/bin:/bin');

describe.runIf(requireOrSkip('util-linux prlimit', prlimit !== null, 'apt-get install util-linux'))(
  'raiseNofile',
  () => {
    it('raises a process’s soft limit to its hard limit, and says so', async () => {
      const child = spawn(prlimit!, ['--nofile=256:4096', 'sleep', '30'], { stdio: 'ignore' });
      try {
        // prlimit sets the limit, then execs sleep: once the process is sleep, the limit is in place.
        await waitFor(() => readFileSync(`/proc/${child.pid}/comm`, 'utf8').trim() === 'sleep', {
          timeoutMs: 5000,
          what: 'prlimit to exec sleep',
        });
        const outcome = raiseNofile(child.pid!);
        expect(outcome).toEqual({ raised: true, from: 256, to: 4096 });
        const limits = execFileSync('cat', [`/proc/${child.pid}/limits`], { encoding: 'utf8' });
        expect(limits).toMatch(/Max open files\s+4096\s+4096/);
        expect(raiseNofile(child.pid!)).toMatchObject({ raised: false, reason: 'already at the hard limit' });
      } finally {
        child.kill();
      }
    });

    it('says why when it cannot', () => {
      expect(raiseNofile(2 ** 22 + 12345)).toMatchObject({ raised: false });
    });
  },
);
