import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { expandHostlist, HostlistError } from '../../../../../worker/slurm/cli/hostlist.js';
import {
  formatSlurmTimeLimit,
  parseExitCode,
  parseFields,
  parseGpuGres,
  parseJobLine,
  parseJobState,
  parseNodeLine,
  parseSlurmDuration,
} from '../../../../../worker/slurm/cli/parse.js';

/** Captured from slurm-wlm 22.05.8 (Debian 12), the local test cluster; see test/fixtures/slurm/. */
const fixture = (name: string) =>
  readFileSync(join(import.meta.dirname, '../../../../fixtures/slurm', name), 'utf8');
const lineOf = (name: string, i = 0) =>
  fixture(name)
    .split('\n')
    .filter((l) => l.trim() !== '')[i] as string;

describe('scontrol show job -d -o', () => {
  it('a running 2-GPU job: node, GPU indices, times, marker', () => {
    const j = parseJobLine(lineOf('job-running-2gpu.txt'));
    expect(j).toMatchObject({
      name: 'sdrv-fx-run',
      comment: 'sdrv-fx',
      user: 'root',
      partition: 'gpu',
      account: null,
      state: 'RUNNING',
      reason: null,
      exitCode: null,
      signal: null,
      nodes: ['localhost'],
      gpus: [{ node: 'localhost', indices: [0, 1] }],
      gpusPerNode: 2,
      numNodes: 1,
      endTime: null,
      timeLimitSeconds: null,
      batchHost: 'localhost',
    });
    expect(j.startTime).toBe(Date.UTC(2026, 11, 1, 23, 29, 16));
  });

  it('a foreign job: a comment with spaces stays one value, and its GPUs are its own', () => {
    const j = parseJobLine(lineOf('job-running-foreign.txt'));
    expect(j.comment).toBe('foreign job with spaces');
    expect(j.gpus).toEqual([{ node: 'localhost', indices: [2, 3, 4] }]);
    expect(j.stderr).toBe('/dev/null');
  });

  it("a pending job: Slurm's reason, no nodes, no start", () => {
    const j = parseJobLine(lineOf('job-pending-resources.txt'));
    expect(j).toMatchObject({ state: 'PENDING', reason: 'Resources', nodes: [], gpus: [], startTime: null });
    expect(j.gpusPerNode).toBe(8);
  });

  it('ended jobs: exit code, signal, reason', () => {
    expect(parseJobLine(lineOf('job-failed-exit2.txt'))).toMatchObject({
      state: 'FAILED',
      reason: 'NonZeroExitCode',
      exitCode: 2,
      signal: null,
    });
    expect(parseJobLine(lineOf('job-failed-signal.txt'))).toMatchObject({
      state: 'FAILED',
      exitCode: 0,
      signal: 9,
    });
    const c = parseJobLine(lineOf('job-cancelled.txt'));
    expect(c).toMatchObject({ state: 'CANCELLED', exitCode: 0, signal: 15 });
    expect(c.endTime).not.toBeNull();
  });

  it('a job past its time limit', () => {
    expect(parseJobLine(lineOf('job-timeout.txt'))).toMatchObject({
      state: 'TIMEOUT',
      reason: 'TimeLimit',
      exitCode: 143,
      timeLimitSeconds: 60,
    });
  });

  it('a two-node job: compressed node groups expand to per-node indices', () => {
    const j = parseJobLine(lineOf('job-running-2node.txt', 0));
    expect(j.nodes).toEqual(['n1', 'n2']);
    expect(j.numNodes).toBe(2);
    expect(j.gpus).toEqual([
      { node: 'n1', indices: [0, 1] },
      { node: 'n2', indices: [0, 1] },
    ]);
    expect(parseJobLine(lineOf('job-running-2node.txt', 1)).gpus).toEqual([{ node: 'n2', indices: [2] }]);
  });

  it('keeps repeated keys in order', () => {
    const f = parseFields('A=1 Nodes=x GRES=gpu:1(IDX:0) Nodes=y GRES=gpu:1(IDX:3) OS=Linux 6.1 #1 SMP Z=');
    expect(f).toEqual([
      ['A', '1'],
      ['Nodes', 'x'],
      ['GRES', 'gpu:1(IDX:0)'],
      ['Nodes', 'y'],
      ['GRES', 'gpu:1(IDX:3)'],
      ['OS', 'Linux 6.1 #1 SMP'],
      ['Z', ''],
    ]);
  });
});

describe('scontrol show node -d -o', () => {
  it('22.05 without GPU types prints GresUsed without IDX', () => {
    const n = parseNodeLine(lineOf('node-mixed.txt'));
    expect(n).toMatchObject({
      name: 'localhost',
      state: 'MIXED',
      stateFlags: [],
      unavailable: false,
      cpus: 16,
      gpus: 8,
      gpusUsed: 5,
      usedGpuIndices: null,
      partitions: ['gpu'],
      reason: null,
      realMemoryMib: 24105,
    });
  });

  it("RealMemory: Slurm's unconfigured default (1) or none reads as unknown", () => {
    const line = lineOf('node-mixed.txt');
    expect(parseNodeLine(line.replace('RealMemory=24105', 'RealMemory=1')).realMemoryMib).toBeNull();
    expect(parseNodeLine(line.replace('RealMemory=24105 ', '')).realMemoryMib).toBeNull();
  });

  it('a drained node is unavailable, with its reason', () => {
    const [n1, n2] = fixture('nodes-2node-drain.txt')
      .split('\n')
      .filter((l) => l.startsWith('NodeName='))
      .map(parseNodeLine);
    expect(n1).toMatchObject({ name: 'n1', state: 'MIXED', unavailable: false, gpus: 4, gpusUsed: 2 });
    expect(n2).toMatchObject({
      name: 'n2',
      state: 'MIXED',
      stateFlags: ['DRAIN'],
      unavailable: true,
      gpusUsed: 3,
    });
    expect(n2?.reason).toBe('broker test: drained node [root@2026-12-01T23:29:41]');
  });

  it('GresUsed with IDX (typed GPUs) gives the indices', () => {
    expect(parseGpuGres('gpu:a100:2(IDX:0,3),gpu:v100:1(IDX:5)')).toEqual({ count: 3, indices: [0, 3, 5] });
    expect(parseGpuGres('gpu:a100:0(IDX:N/A)')).toEqual({ count: 0, indices: [] });
    expect(parseGpuGres('gpu:a100:4(S:0-1),mps:100')).toEqual({ count: 4, indices: null });
    expect(parseGpuGres('gres:gpu:2')).toEqual({ count: 2, indices: null });
    expect(parseGpuGres('(null)')).toEqual({ count: 0, indices: null });
  });
});

describe('states, exit codes, durations', () => {
  it('maps state words, flags and sacct forms', () => {
    expect(parseJobState('CANCELLED by 0')).toBe('CANCELLED');
    expect(parseJobState('TIMEOUT')).toBe('TIMEOUT');
    expect(parseJobState('OUT_OF_MEMORY')).toBe('OUT_OF_MEMORY');
    expect(parseJobState('CD')).toBe('COMPLETED');
    expect(parseJobState('SOMETHING_NEW')).toBe('UNKNOWN');
  });

  it('ExitCode=X:S', () => {
    expect(parseExitCode('2:0')).toEqual({ code: 2, signal: null });
    expect(parseExitCode('0:15')).toEqual({ code: 0, signal: 15 });
    expect(parseExitCode('bad')).toBeNull();
  });

  it('durations in every Slurm form', () => {
    expect(parseSlurmDuration('365-00:00:00')).toBe(365 * 86400);
    expect(parseSlurmDuration('1-02:03:04')).toBe(86400 + 7384);
    expect(parseSlurmDuration('02:03:04')).toBe(7384);
    expect(parseSlurmDuration('03:04')).toBe(184);
    expect(parseSlurmDuration('5')).toBe(300);
    expect(parseSlurmDuration('UNLIMITED')).toBeNull();
    expect(parseSlurmDuration('Partition_Limit')).toBeNull();
  });

  it('--time rounds seconds up to whole minutes, and round-trips', () => {
    expect(formatSlurmTimeLimit(1)).toBe('0-00:01:00');
    expect(formatSlurmTimeLimit(60)).toBe('0-00:01:00');
    expect(formatSlurmTimeLimit(61)).toBe('0-00:02:00');
    expect(formatSlurmTimeLimit(86400 + 3600)).toBe('1-01:00:00');
    expect(() => formatSlurmTimeLimit(0)).toThrow(RangeError);
    expect(() => formatSlurmTimeLimit(Number.NaN)).toThrow(RangeError);
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 10_000_000 }), (s) => {
        const back = parseSlurmDuration(formatSlurmTimeLimit(s)) as number;
        return back >= s && back - s < 60;
      }),
    );
  });
});

describe('hostlist', () => {
  it('expands ranges, padding, lists and several brackets', () => {
    expect(expandHostlist('node[01-03,07]')).toEqual(['node01', 'node02', 'node03', 'node07']);
    expect(expandHostlist('n[08-10],gpu-a1')).toEqual(['n08', 'n09', 'n10', 'gpu-a1']);
    expect(expandHostlist('r[1-2]-g[1-2]')).toEqual(['r1-g1', 'r1-g2', 'r2-g1', 'r2-g2']);
    expect(expandHostlist('localhost')).toEqual(['localhost']);
    expect(expandHostlist('(null)')).toEqual([]);
  });

  it('refuses bad or huge expressions', () => {
    for (const bad of ['n[1-', 'n[3-1]', 'n[a-b]', 'n]1[', 'a,,b', 'n[1-99999999]'])
      expect(() => expandHostlist(bad), bad).toThrow(HostlistError);
  });
});
