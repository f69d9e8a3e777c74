import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { logTruncatedMarker } from '../../../src/contracts/worker-protocol.js';
import type { SlurmBackend } from '../../../worker/slurm/backend.js';
import { SlurmDriver } from '../../../worker/slurm/cli/driver.js';
import { startSlurmExecution } from '../../../worker/slurm/executor.js';
import { makePlan } from '../../support/executor-plan.js';
import { ensureSlurm } from '../../support/slurm.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/**
 * docs/performance.md "Noisy neighbours": a Slurm job's own stdout.log and stderr.log on the shared file system hold at most the
 * task's log cap (plus the marker line) per stream, however much the task writes, and the task still
 * ends with its own exit code. Through the Slurm executor on the real local Slurm (one 1-GPU job).
 */
const avail = ensureSlurm();
const CAP = 64 * 1024;
const MARKER = Buffer.byteLength(logTruncatedMarker(CAP));

describe.runIf(avail.ok)(
  avail.ok ? 'Slurm job logs on the shared file system are capped' : (avail as { reason: string }).reason,
  () => {
    const slurm = avail.ok ? avail.slurm : (undefined as never);
    afterAll(() => removeTempDirs());

    it('a job writing 32 MiB past a 64 KiB cap leaves ≤ cap + marker per file and ends with exit 7', async () => {
      const backend: SlurmBackend = {
        driver: new SlurmDriver({ env: slurm.env }),
        partition: slurm.partition,
        extraArgs: [],
        jobDir: makeTempDir('slurm-logcap'),
        sandbox: null,
        pollMs: 200,
      };
      const plan = makePlan({
        argv: [
          '/bin/bash',
          '-c',
          'head -c 25165824 /dev/zero | tr "\\0" o; head -c 8388608 /dev/zero | tr "\\0" e >&2; exit 7',
        ],
        timeLimit: 300,
      });
      const forwarded = { stdout: 0, stderr: 0 };
      const h = startSlurmExecution(plan, {
        backend,
        clock: { now: () => Date.now() },
        workerId: 'w-logcap',
        provider: 'sim',
        maxLogBytes: CAP,
        onLog: (stream, _offset, data) => {
          forwarded[stream] += Buffer.byteLength(data);
        },
        onJob: () => undefined,
      });
      const exited = await h.exited;
      expect(exited).toMatchObject({ exit_code: 7, failure_reason: 'EXIT_NONZERO' });
      const dir = join(backend.jobDir, plan.execution_id);
      for (const [name, fill] of [
        ['stdout.log', 'o'],
        ['stderr.log', 'e'],
      ] as const) {
        const bytes = readFileSync(join(dir, name));
        expect(bytes.length, name).toBeLessThanOrEqual(CAP + MARKER);
        expect(bytes.subarray(0, 1024).toString(), name).toBe(fill.repeat(1024));
        expect(bytes.subarray(bytes.length - MARKER).toString(), name).toBe(logTruncatedMarker(CAP));
      }
      expect(() => statSync(join(dir, 'stdout.fifo'))).toThrow(/ENOENT/);
      // What the worker forwards: the cap for both streams together, plus one marker each.
      expect(forwarded.stdout + forwarded.stderr).toBeLessThanOrEqual(CAP + 2 * MARKER);
      await h.done;
    }, 240_000);
  },
);
