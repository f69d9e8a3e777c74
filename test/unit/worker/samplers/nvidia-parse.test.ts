import { describe, expect, it } from 'vitest';
import { SamplerError } from '../../../../worker/samplers/card-sampler.js';
import {
  nvidiaHealth,
  parseComputeAppsCsv,
  parseNvidiaCoreCsv,
  parseNvidiaHealthCsv,
  rejectedField,
  splitCsvRow,
} from '../../../../worker/samplers/nvidia-parse.js';

// Literal text as a real nvidia-smi prints it (H100 hosts), narrowed to the core field list.
const CORE = `0, GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1, NVIDIA H100 80GB HBM3, 81559, 1, 0, 30, 100.89
1, GPU-7c3cadbd-17e5-0913-f69b-c618122ea0cd, NVIDIA H100 80GB HBM3, 81559, 1, 0, 30, 82.41
`;

describe('parseNvidiaCoreCsv', () => {
  it('reads the documented sample', () => {
    const cards = parseNvidiaCoreCsv(CORE);
    expect(cards).toEqual([
      {
        index: 0,
        uuid: 'GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1',
        model: 'NVIDIA H100 80GB HBM3',
        memory_used_mib: 1,
        memory_total_mib: 81559,
        utilization_pct: 0,
        temperature_c: 30,
        power_w: 100.89,
        health: 'unknown',
        health_reasons: [],
        processes: [],
        simulated: false,
      },
      expect.objectContaining({ index: 1, uuid: 'GPU-7c3cadbd-17e5-0913-f69b-c618122ea0cd', power_w: 82.41 }),
    ]);
  });

  it('turns [N/A], [Not Supported] and N/A into null, never 0', () => {
    const [card] = parseNvidiaCoreCsv(
      '0, GPU-a, NVIDIA H200, 143771, [N/A], [Not Supported], N/A, [Unknown Error]\n',
    );
    expect(card).toMatchObject({
      memory_total_mib: 143771,
      memory_used_mib: null,
      utilization_pct: null,
      temperature_c: null,
      power_w: null,
    });
  });

  it('keeps a comma inside the card name and skips blank lines', () => {
    const [card] = parseNvidiaCoreCsv('\n0, GPU-a, Odd, Name, 1, 0, 0, 30, 10\n\n');
    expect(card?.model).toBe('Odd, Name');
    expect(card?.memory_total_mib).toBe(1);
  });

  it('reads empty output as no cards', () => {
    expect(parseNvidiaCoreCsv('')).toEqual([]);
  });

  it('refuses rows it cannot attribute', () => {
    expect(() => parseNvidiaCoreCsv('0, GPU-a, H100\n')).toThrow(SamplerError);
    expect(() => parseNvidiaCoreCsv('x, GPU-a, H100, 1, 1, 1, 1, 1\n')).toThrow(/bad index/);
    expect(() => parseNvidiaCoreCsv('0, [N/A], H100, 1, 1, 1, 1, 1\n')).toThrow(/no uuid/);
  });
});

describe('splitCsvRow', () => {
  it('returns null for too few fields', () => {
    expect(splitCsvRow('a, b', 3, 1)).toBeNull();
  });
});

describe('parseComputeAppsCsv', () => {
  it('reads the documented sample', () => {
    expect(parseComputeAppsCsv('GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1, 48213, python, 40560\n')).toEqual([
      {
        gpu_uuid: 'GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1',
        process: { pid: 48213, name: 'python', used_memory_mib: 40560 },
      },
    ]);
  });

  it('reads empty output as no processes, and [N/A] memory as null', () => {
    expect(parseComputeAppsCsv('')).toEqual([]);
    expect(parseComputeAppsCsv('GPU-a, 7, /opt/my, app, [N/A]\n')[0]?.process).toEqual({
      pid: 7,
      name: '/opt/my, app',
      used_memory_mib: null,
    });
  });

  it('refuses a row without a pid rather than hiding a process', () => {
    expect(() => parseComputeAppsCsv('GPU-a, [N/A], python, 1\n')).toThrow(/bad pid/);
  });
});

describe('health', () => {
  it('reads readings by uuid', () => {
    const map = parseNvidiaHealthCsv('GPU-a, 0, No\nGPU-b, [N/A], Yes\n', [
      'ecc.errors.uncorrected.volatile.total',
      'remapped_rows.pending',
    ]);
    expect(map.get('GPU-b')).toEqual({
      'ecc.errors.uncorrected.volatile.total': '[N/A]',
      'remapped_rows.pending': 'Yes',
    });
    expect(() =>
      parseNvidiaHealthCsv('GPU-a, 0\n', ['ecc.errors.uncorrected.volatile.total', 'remapped_rows.pending']),
    ).toThrow(SamplerError);
  });

  it('is ok when measured and clean, unknown when nothing was measured', () => {
    expect(
      nvidiaHealth({ 'ecc.errors.uncorrected.volatile.total': '0', 'remapped_rows.pending': 'No' }),
    ).toEqual({
      health: 'ok',
      health_reasons: [],
    });
    expect(nvidiaHealth({ 'ecc.errors.uncorrected.volatile.total': '[N/A]' }).health).toBe('unknown');
    expect(nvidiaHealth({}).health).toBe('unknown');
  });

  it('degrades on uncorrected ECC or pending remaps, fails on a remap failure', () => {
    const ecc = nvidiaHealth({ 'ecc.errors.uncorrected.volatile.total': '3' });
    expect(ecc.health).toBe('degraded');
    expect(ecc.health_reasons).toEqual(['ecc.uncorrected.volatile=3']);
    expect(nvidiaHealth({ 'remapped_rows.pending': 'Yes' }).health).toBe('degraded');
    expect(nvidiaHealth({ 'retired_pages.pending': 'Yes' }).health).toBe('degraded');
    const failed = nvidiaHealth({
      'remapped_rows.failure': 'Yes',
      'ecc.errors.uncorrected.volatile.total': '1',
    });
    expect(failed.health).toBe('failed');
    expect(failed.health_reasons).toHaveLength(2);
  });
});

describe('rejectedField', () => {
  it('finds the refused field in the driver message', () => {
    expect(rejectedField('Field "remapped_rows.pending" is not a valid field to query.\n\n')).toBe(
      'remapped_rows.pending',
    );
    expect(rejectedField('Field “encoder.stats.sessionCount” is not a valid field to query.')).toBe(
      'encoder.stats.sessionCount',
    );
    expect(
      rejectedField("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
    ).toBeNull();
  });
});
