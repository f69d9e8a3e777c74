import { chownSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cardLabel } from '../../../src/contracts/sample.js';
import { ALWAYS_HIDDEN, bwrapArgs, findOnPath, systemMounts } from '../../../worker/sandbox/bwrap.js';
import { SlurmDriver } from '../../../worker/slurm/cli/driver.js';
import { type PoolGres, parseGresConf } from '../../../worker/slurm/cli/gres.js';
import { readExit, writeJobFiles } from '../../../worker/slurm/cli/job-wrapper.js';
import {
  hiddenPathList,
  splitBwrapArgs,
  type WrapperSandbox,
} from '../../../worker/slurm/cli/rank-script.js';
import { leaseGresType } from '../../../worker/slurm/job-setup.js';
import { poolSample } from '../../../worker/slurm/sampler.js';
import { isRoot, requireOrSkip } from '../../support/require-or-skip.js';
import { MIG_SLURM_LAYOUT, startMigSlurm, stopMigSlurm } from '../../support/slurm.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';

/**
 * MIG slices as typed GRES on a real Slurm (22.05.8, a third local cluster: node `mig1` with
 * `Gres=gpu:h100:1,gpu:3g.40gb:1,gpu:1g.10gb:2` and gres.conf `MultipleFiles=` of stand-in device nodes,
 * test/support/slurm.ts startMigSlurm). The worker's pool sampler reads the slices with their minors;
 * two jobs submitted as `--gres=gpu:1g.10gb:1` through the job wrapper run at once on the two slices,
 * and each rank's bwrap sandbox holds its own slice's capability nodes only: the other slice's are not
 * there (ENOENT). docs/slurm.md "MIG slices".
 */
const bwrap = findOnPath('bwrap', process.env.PATH ?? '');
const setpriv = findOnPath('setpriv', process.env.PATH ?? '');
// Stand-in device nodes need mknod (root), each rank bwrap; startMigSlurm needs a local Slurm (CI: required).
const machineOk = requireOrSkip(
  'root and bubblewrap',
  isRoot && bwrap !== null,
  'stand-in device nodes need mknod',
);
const avail = machineOk ? startMigSlurm() : { ok: false as const, reason: 'needs root and bubblewrap' };
const TASK_UID = 2_000_000_779;

describe.runIf(avail.ok)(
  avail.ok ? 'MIG slices as typed GRES on a real Slurm' : (avail as { reason: string }).reason,
  () => {
    const slurm = avail.ok ? avail.slurm : (undefined as never);
    let driver: SlurmDriver;
    let root: string;
    let gres: PoolGres;
    const submitted: string[] = [];

    beforeAll(() => {
      root = makeTempDir('slurm-mig');
      driver = new SlurmDriver({ env: slurm.env });
    });
    afterAll(async () => {
      for (const id of submitted) await driver.cancel(id).catch(() => undefined);
      if (slurm.startedHere) stopMigSlurm();
      removeTempDirs();
    });

    /**
     * Submits `probe` in a rank sandbox through the job wrapper as `--gres=gpu:<type>:1`, or one GPU of
     * each of several types (`--gres=gpu:<a>:n,gpu:<b>:m`); its job dir.
     */
    const submitProbe = async (
      name: string,
      probe: string,
      ask: string | ReadonlyArray<{ type: string; count: number }>,
    ): Promise<string> => {
      const dir = join(root, name);
      const taskDir = join(dir, 'task');
      const argv = ['/bin/sh', '-c', probe];
      const identity = setpriv !== null ? { uid: TASK_UID, gid: TASK_UID, setpriv } : null;
      const args = bwrapArgs({
        system: systemMounts(),
        taskDir,
        hidden: [],
        pinned: [],
        devices: [],
        network: 'none',
        identity,
        statusFd: null,
        argv,
      });
      const sandbox: WrapperSandbox = {
        bwrap: bwrap as string,
        ...splitBwrapArgs(args, argv)!,
        hidden: hiddenPathList([...ALWAYS_HIDDEN]),
        gpuDevDir: '/nonexistent',
        gresFiles: Object.fromEntries(gres.files),
      };
      const f = await writeJobFiles({ jobDir: dir, argv, sandbox });
      mkdirSync(taskDir, { mode: 0o700 });
      if (identity !== null) chownSync(taskDir, TASK_UID, TASK_UID);
      const id = await driver.submit({
        scriptPath: f.script,
        stdout: f.stdout,
        stderr: f.stderr,
        chdir: taskDir,
        jobName: `gbtest-mig-${name}-${process.pid}`,
        comment: `gbtest-mig-${process.pid}`,
        partition: 'gpu',
        ...(typeof ask === 'string'
          ? { gpusPerNode: 1, gpuType: ask }
          : { gpusPerNode: ask.reduce((n, t) => n + t.count, 0), gpuTypes: ask }),
        timeLimitSeconds: 120,
      });
      submitted.push(id);
      return dir;
    };

    /** The job's stdout once it exited 0 (its stderr in the message when it did not). */
    const succeeded = async (dir: string): Promise<string> => {
      const exit = await waitFor(() => readExit(dir), {
        timeoutMs: 90_000,
        intervalMs: 200,
        what: 'exit.json',
      });
      const out = readFileSync(join(dir, 'stdout.log'), 'utf8');
      expect(exit.exit_code, `${out}\n${readFileSync(join(dir, 'stderr.log'), 'utf8')}`).toBe(0);
      return out;
    };

    it('the pool sampler reads the typed GRES and the gres.conf beside slurm.conf into slice cards with their minors', async () => {
      const nodes = await driver.nodes('gpu');
      expect(nodes.map((n) => [n.name, n.gpus, n.gresTypes])).toEqual([
        [
          'mig1',
          4,
          [
            { type: 'h100', count: 1 },
            { type: '3g.40gb', count: 1 },
            { type: '1g.10gb', count: 2 },
          ],
        ],
      ]);
      const text = await driver.gresConf();
      expect(text).toContain('MultipleFiles=');
      const sample = poolSample(nodes, () => false, true, parseGresConf(text ?? ''));
      gres = sample.gres;
      expect(
        sample.cards.map((c) => [
          cardLabel(c.index),
          c.mig?.profile ?? 'whole',
          c.mig?.gi_access_minor ?? null,
        ]),
      ).toEqual([
        ['0', 'whole', null],
        ['0:mig:1/0', '3g.40gb', 12],
        ['0:mig:2/0', '1g.10gb', 21],
        ['0:mig:3/0', '1g.10gb', 30],
      ]);
      expect(sample.cards.every((c) => c.health === 'ok')).toBe(true);
      // The whole card's model names its type (a spec's `cards.model: H100` matches it); the slices'
      // types are their profiles.
      expect(sample.cards.map((c) => c.model)).toEqual([
        'slurm gpu h100 (simulated)',
        'slurm gpu (simulated)',
        'slurm gpu (simulated)',
        'slurm gpu (simulated)',
      ]);
    });

    it('two 1g.10gb jobs run at once, each on its slice: its own cap nodes open, the other slice’s do not exist', async () => {
      const caps = MIG_SLURM_LAYOUT.caps['1g.10gb'] as Array<[number, number]>;
      const slice = [...gres.cards].find(([, c]) => c.position === 2)?.[0] as number;
      const type = leaseGresType({ cards: [{ index: slice, uuid: 'slurm:mig1:gpu2' }] }, gres);
      expect(type).toEqual({ type: '1g.10gb', problem: null });
      const probe = [
        'echo "steps=$GPU_BROKER_GPU_IDS cvd=$CUDA_VISIBLE_DEVICES caps=$(ls /dev/nvidia-caps | tr "\\n" " ")"',
        `for m in ${caps.flat().join(' ')}; do if cat /dev/nvidia-caps/nvidia-cap$m >/dev/null 2>/tmp/e; then echo "open $m ok"; else echo "open $m: $(cat /tmp/e)"; fi; done`,
        // Both jobs hold their slices together, so Slurm gives them the two different ones.
        'sleep 4',
      ].join('; ');
      const dirs: string[] = [];
      for (const name of ['a', 'b']) dirs.push(await submitProbe(name, probe, type?.type as string));
      const outputs: string[] = [];
      for (const dir of dirs) outputs.push(await succeeded(dir));
      const steps = outputs.map((o) => /steps=(\d+)/.exec(o)?.[1]);
      expect(new Set(steps)).toEqual(new Set(['2', '3']));
      for (const out of outputs) {
        const position = Number(/steps=(\d+)/.exec(out)?.[1]);
        const [mine, theirs] = position === 2 ? [caps[0], caps[1]] : [caps[1], caps[0]];
        expect(out).toContain(`cvd=0 caps=nvidia-cap${mine?.[0]} nvidia-cap${mine?.[1]} \n`);
        for (const m of mine ?? []) expect(out).toContain(`open ${m} ok`);
        for (const m of theirs ?? [])
          expect(out).toMatch(new RegExp(`open ${m}: .*No such file or directory`));
      }
    });

    it('a whole card asked for by its type is the one Slurm gives, not a slice beside it', async () => {
      const whole = [...gres.cards].find(([, c]) => c.profile === null)?.[0] as number;
      const type = leaseGresType({ cards: [{ index: whole, uuid: 'slurm:mig1:gpu0' }] }, gres);
      expect(type).toEqual({ type: 'h100', problem: null });
      const dir = await submitProbe('whole', 'echo "steps=$GPU_BROKER_GPU_IDS"', type?.type as string);
      expect(await succeeded(dir)).toContain('steps=0\n');
    });

    it('several GRES types in one request: Slurm gives one GPU of each, the positions of those types', async () => {
      // `--gres=gpu:3g.40gb:1,gpu:1g.10gb:1` (what a one-node lease across types is submitted as).
      const dir = await submitProbe('types', 'echo "steps=$GPU_BROKER_GPU_IDS"', [
        { type: '3g.40gb', count: 1 },
        { type: '1g.10gb', count: 1 },
      ]);
      const steps = /steps=([\d,]+)/
        .exec(await succeeded(dir))?.[1]
        ?.split(',')
        .map(Number);
      // Position 1 is the 3g.40gb slice, 2 and 3 the 1g.10gb ones; 0 (the h100) is not given.
      expect(steps).toHaveLength(2);
      expect(steps).toContain(1);
      expect(steps?.some((p) => p === 2 || p === 3)).toBe(true);
    });
  },
);
