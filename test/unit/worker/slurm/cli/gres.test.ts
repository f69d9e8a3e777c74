import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseMigProfileName } from '../../../../../worker/samplers/mig-profiles.js';
import {
  migProfileOfType,
  nodeGresPositions,
  parseGresConf,
  parseGresTypes,
  sandboxDevicePath,
  sliceOfFiles,
} from '../../../../../worker/slurm/cli/gres.js';
import { parseJobLine, parseNodeLine } from '../../../../../worker/slurm/cli/parse.js';

/**
 * Typed GPU GRES (worker/slurm/cli/gres.ts) on the real formats: `scontrol show node/job -d -o` lines
 * captured from Slurm 22.05.8 with MIG slices as typed GRES (test/fixtures/slurm/node-mig-typed.txt,
 * job-running-mig.txt), gres.conf as the man page (gres.conf(5)) and NVML autodetect write it.
 */
const FIXTURES = join(import.meta.dirname, '../../../../fixtures/slurm');

/** The test cluster's gres.conf (docs/slurm.md "MIG slices"), in another order than slurm.conf's Gres=. */
const GRES_CONF = `# written by the MIG test
AutoDetect=off
NodeName=mig1 Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap13
NodeName=mig1 Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap30,/dev/nvidia-caps/nvidia-cap31
NodeName=mig1 Name=gpu Type=h100 File=/dev/nvidia1   # the whole card
nodename=mig1 name=gpu type=1g.10gb multiplefiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22
Name=mps Count=100 File=/dev/nvidia1
`;

describe('gres.conf', () => {
  it('reads GPU lines: File ranges one record per file, MultipleFiles one record, keys in any case, comments', () => {
    const records = parseGresConf(`AutoDetect=nvml
NodeName=tux[0-1] Name=gpu Type=a100 File=/dev/nvidia[0-1] Cores=0-7
Name=gpu Type=tesla File=/dev/nvidia2
${GRES_CONF}`);
    expect(records.slice(0, 3)).toEqual([
      { nodes: ['tux0', 'tux1'], type: 'a100', files: ['/dev/nvidia0'] },
      { nodes: ['tux0', 'tux1'], type: 'a100', files: ['/dev/nvidia1'] },
      { nodes: null, type: 'tesla', files: ['/dev/nvidia2'] },
    ]);
    expect(records.slice(3).map((r) => [r.type, r.files.length])).toEqual([
      ['3g.40gb', 3],
      ['1g.10gb', 3],
      ['h100', 1],
      ['1g.10gb', 3],
    ]);
  });

  it('NVML autodetect writes the model before the profile; MultipleFiles with a range', () => {
    const [r] = parseGresConf(
      'Name=gpu Type=nvidia_a100_80gb_pcie_1g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap[66-67] AutoDetect=nvml',
    );
    expect(r?.files).toEqual([
      '/dev/nvidia0',
      '/dev/nvidia-caps/nvidia-cap66',
      '/dev/nvidia-caps/nvidia-cap67',
    ]);
    expect(migProfileOfType(r?.type ?? null)).toBe('1g.10gb');
  });

  it('a MIG profile is told from a model name', () => {
    expect(migProfileOfType('1g.10gb')).toBe('1g.10gb');
    expect(migProfileOfType('3g.40gb')).toBe('3g.40gb');
    expect(migProfileOfType('1c.3g.40gb')).toBe('1c.3g.40gb');
    expect(migProfileOfType('nvidia_h100_80gb_hbm3_3g.40gb')).toBe('3g.40gb');
    for (const whole of ['h100', 'a100', 'nvidia_a100_80gb_pcie', 'tesla_t4', '80gb', null])
      expect(migProfileOfType(whole)).toBeNull();
    // The same names the sampler's profile parser takes apart (mig-profiles.ts), no more, no fewer.
    for (const name of [
      '1g.10gb',
      '1g.10gb+me',
      '1g.24gb-me',
      '1c.3g.40gb',
      '7g.80gb',
      '9g.10gb',
      '3c.1g.10gb',
      'g.10gb',
    ])
      expect(migProfileOfType(name) !== null).toBe(parseMigProfileName(name) !== null);
  });
});

describe('a node’s GPUs by position (IDX)', () => {
  it('parses the typed Gres= of scontrol show node (captured) and keeps untyped pools untyped', () => {
    const node = parseNodeLine(readFileSync(join(FIXTURES, 'node-mig-typed.txt'), 'utf8'));
    expect(node.gpus).toBe(4);
    expect(node.gresTypes).toEqual([
      { type: 'h100', count: 1 },
      { type: '3g.40gb', count: 1 },
      { type: '1g.10gb', count: 2 },
    ]);
    expect(parseNodeLine(readFileSync(join(FIXTURES, 'node-mixed.txt'), 'utf8')).gresTypes).toBeUndefined();
    expect(parseGresTypes('gpu:a100:2(S:0-1),gpu:1g.10gb:3(S:0),mps:200')).toEqual([
      { type: 'a100', count: 2 },
      { type: '1g.10gb', count: 3 },
    ]);
  });

  it('orders positions by Gres= type, then gres.conf order within a type (as Slurm 22.05.8 numbers IDX)', () => {
    const node = parseNodeLine(readFileSync(join(FIXTURES, 'node-mig-typed.txt'), 'utf8'));
    const positions = nodeGresPositions('mig1', node.gresTypes ?? [], parseGresConf(GRES_CONF));
    expect(positions).toEqual([
      { type: 'h100', profile: null, files: ['/dev/nvidia1'] },
      {
        type: '3g.40gb',
        profile: '3g.40gb',
        files: ['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap12', '/dev/nvidia-caps/nvidia-cap13'],
      },
      {
        type: '1g.10gb',
        profile: '1g.10gb',
        files: ['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap30', '/dev/nvidia-caps/nvidia-cap31'],
      },
      {
        type: '1g.10gb',
        profile: '1g.10gb',
        files: ['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap21', '/dev/nvidia-caps/nvidia-cap22'],
      },
    ]);
  });

  it('matches a type in any case, as Slurm does', () => {
    const records = parseGresConf('NodeName=g1 Name=gpu Type=H100 File=/dev/nvidia3');
    expect(nodeGresPositions('g1', [{ type: 'h100', count: 1 }], records)[0]?.files).toEqual([
      '/dev/nvidia3',
    ]);
  });

  it('gives no files where gres.conf has no line for the node, or another count of a type', () => {
    const types = [{ type: '1g.10gb', count: 3 }];
    expect(nodeGresPositions('mig2', types, parseGresConf(GRES_CONF)).map((p) => p.files)).toEqual([
      null,
      null,
      null,
    ]);
    expect(nodeGresPositions('mig1', types, parseGresConf(GRES_CONF)).every((p) => p.files === null)).toBe(
      true,
    );
  });

  it('a job’s GRES IDX counts those positions (captured: the h100 at position 3 of gpu:1g.10gb:2,gpu:3g.40gb:1,gpu:h100:1)', () => {
    const job = parseJobLine(readFileSync(join(FIXTURES, 'job-running-mig.txt'), 'utf8'));
    expect(job.gpus).toEqual([{ node: 'mig1', indices: [3] }]);
  });
});

describe('a slice’s files', () => {
  it('parent and the two capability minors give GPU and compute instance (driver numbering)', () => {
    expect(
      sliceOfFiles(['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap21', '/dev/nvidia-caps/nvidia-cap22']),
    ).toEqual({
      parent: 0,
      giAccessMinor: 21,
      ciAccessMinor: 22,
      gpuInstance: 2,
      computeInstance: 0,
    });
    // Card 1, GI 7, CI 1: 3 + 135 + 63 = 201, CI 201 + 1 + 1.
    expect(
      sliceOfFiles(['/dev/nvidia1', '/dev/nvidia-caps/nvidia-cap203', '/dev/nvidia-caps/nvidia-cap201']),
    ).toMatchObject({
      parent: 1,
      gpuInstance: 7,
      computeInstance: 1,
    });
  });

  it('refuses what is not one card node and two of its caps: config/monitor caps, another card’s, extra files', () => {
    expect(
      sliceOfFiles(['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap1', '/dev/nvidia-caps/nvidia-cap2']),
    ).toBeNull();
    expect(
      sliceOfFiles(['/dev/nvidia1', '/dev/nvidia-caps/nvidia-cap21', '/dev/nvidia-caps/nvidia-cap22']),
    ).toBeNull();
    expect(sliceOfFiles(['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap21'])).toBeNull();
    expect(
      sliceOfFiles([
        '/dev/nvidia0',
        '/dev/nvidia-caps/nvidia-cap21',
        '/dev/nvidia-caps/nvidia-cap22',
        '/dev/nvidiactl',
      ]),
    ).toBeNull();
    expect(
      sliceOfFiles(['/dev/nvidia0', '/dev/nvidia-caps/nvidia-cap21', '/dev/nvidia-caps/nvidia-cap30']),
    ).toBeNull();
  });

  it('binds a device file at its /dev path, nothing else', () => {
    expect(sandboxDevicePath('/tmp/dev/nvidia3')).toBe('/dev/nvidia3');
    expect(sandboxDevicePath('/tmp/dev/nvidia-caps/nvidia-cap22')).toBe('/dev/nvidia-caps/nvidia-cap22');
    expect(sandboxDevicePath('/dev/nvidiactl')).toBeNull();
    expect(sandboxDevicePath('/etc/shadow')).toBeNull();
  });
});
