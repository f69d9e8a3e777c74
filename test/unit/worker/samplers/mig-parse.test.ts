import { describe, expect, it } from 'vitest';
import {
  parseCapabilityAccess,
  parseComputeInstances,
  parseGpuInstances,
  parseMigDevicesTable,
  parseMigMinors,
  parseMigModeCsv,
  parseNvidiaList,
} from '../../../../worker/samplers/mig-parse.js';

// Golden samples: the public formats (ADR 0046, "Sources"), as NVIDIA's MIG user
// guide and public dumps print them. None was captured on a real card here yet (scripts/device-check.sh
// captures them on the first run on one).

const LIST_CURRENT = `GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-9c73eb7b-8d6d-6c0e-dc13-97873e2ede40)
  MIG 1g.10gb     Device  0: (UUID: MIG-a686709d-6dc2-542a-8851-0d2508448c10)
  MIG 1g.10gb     Device  1: (UUID: MIG-53864714-0a66-5df2-9007-9268e30d9a72)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-1d2a2ee6-0b5a-4f34-b16c-f8a3c2f0b1d7)
`;

const LIST_R450 = `GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 4g.20gb Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/2/0)
  MIG 3g.20gb Device 1: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/1/0)
`;

const LGI_57 = `+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 3g.20gb          9        1          4:4     |
+-------------------------------------------------------+
|   0  MIG 3g.20gb          9        2          0:4     |
+-------------------------------------------------------+
`;

const LGI_54 = `+----------------------------------------------------+
| GPU instances:                                     |
| GPU   Name          Profile  Instance   Placement  |
|                       ID       ID       Start:Size |
|====================================================|
|   0  MIG 1g.5gb       19       13          6:1     |
+----------------------------------------------------+
`;

const LCI = `+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0      3       MIG 2g.20gb          1         0          0:2     |
+--------------------------------------------------------------------+
|   0      1       MIG 1c.3g.40gb       0         1          1:1     |
+--------------------------------------------------------------------+
`;

const DEVICES_OLD = `+-----------------------------------------------------------------------------+
| MIG devices:                                                                |
+------------------+----------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |         Memory-Usage |        Vol|         Shared        |
|      ID  ID  Dev |           BAR1-Usage | SM     Unc| CE  ENC  DEC  OFA  JPG|
|                  |                      |        ECC|                       |
|==================+======================+===========+=======================|
|  0    2   0   0  |     11MiB / 20096MiB | 42      0 |  3   0    2    0    0 |
|                  |      0MiB / 32767MiB |           |                       |
+------------------+----------------------+-----------+-----------------------+
|  0    9   0   1  |      3MiB /  4864MiB | 14      0 |  1   0    0    0    0 |
|                  |      0MiB /  8191MiB |           |                       |
+------------------+----------------------+-----------+-----------------------+

+-----------------------------------------------------------------------------+
| Processes:                                                                  |
|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
|        ID   ID                                                   Usage      |
|=============================================================================|
|  No running processes found                                                 |
+-----------------------------------------------------------------------------+
`;

// R535+ width, preceded by the GPU table it follows in plain `nvidia-smi`.
const DEVICES_NEW = `| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|   0  NVIDIA A100 80GB PCIe          On  |   00000000:B6:00.0 Off |                   On |
| N/A   54C    P0             90W /  300W |     249MiB /  81920MiB |     N/A      Default |
+---------------------------------------------------------------------------------------+
| MIG devices:                                                                          |
+------------------+----------------------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |
|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |
|                  |                                  |        ECC|                       |
|==================+==================================+===========+=======================|
|  0    1   0   0  |             107MiB / 40192MiB    | 42      0 |  3   0    2    0    0 |
|                  |                 0MiB / 65535MiB  |           |                       |
+------------------+----------------------------------+-----------+-----------------------+
|  0   13   0   2  |              36MiB /  9728MiB    | 14      0 |  1   0    0    0    0 |
+------------------+----------------------------------+-----------+-----------------------+
`;

describe('parseNvidiaList', () => {
  it('reads the current format: GPU lines and MIG-<uuid> devices under them', () => {
    const list = parseNvidiaList(LIST_CURRENT);
    expect(list.problems).toEqual([]);
    expect(list.gpus).toEqual([
      { index: 0, name: 'NVIDIA A100-SXM4-80GB', uuid: 'GPU-9c73eb7b-8d6d-6c0e-dc13-97873e2ede40' },
      { index: 1, name: 'NVIDIA A100-SXM4-80GB', uuid: 'GPU-1d2a2ee6-0b5a-4f34-b16c-f8a3c2f0b1d7' },
    ]);
    expect(list.migDevices).toEqual([
      {
        gpu_index: 0,
        device: 0,
        profile: '1g.10gb',
        uuid: 'MIG-a686709d-6dc2-542a-8851-0d2508448c10',
        legacy: null,
      },
      {
        gpu_index: 0,
        device: 1,
        profile: '1g.10gb',
        uuid: 'MIG-53864714-0a66-5df2-9007-9268e30d9a72',
        legacy: null,
      },
    ]);
  });

  it('reads the R450 format, whose uuid carries the GPU uuid, GI and CI', () => {
    const list = parseNvidiaList(LIST_R450);
    expect(list.problems).toEqual([]);
    expect(list.migDevices[0]).toEqual({
      gpu_index: 0,
      device: 0,
      profile: '4g.20gb',
      uuid: 'MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/2/0',
      legacy: { gpu_uuid: 'GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77', gpu_instance: 2, compute_instance: 0 },
    });
    expect(list.migDevices[1]?.legacy).toMatchObject({ gpu_instance: 1, compute_instance: 0 });
  });

  it('reports what it cannot read and keeps the rest', () => {
    const list = parseNvidiaList(
      [
        '  MIG 1g.10gb Device 0: (UUID: MIG-0000)', // before any GPU
        'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)',
        '  MIG 1g.10gb Device x: (UUID: MIG-1111)', // bad device number
        '  MIG 1g.10gb Device 1: (UUID: GPU-2222)', // not a MIG uuid
        '  MIG 1g.10gb Device 2: (UUID: MIG-GPU-abc/2)', // R450 without the CI
        'Failed to initialize NVML: Driver/library version mismatch',
        '  MIG 1g.10gb Device 3: (UUID: MIG-3333)',
      ].join('\n'),
    );
    expect(list.gpus).toHaveLength(1);
    expect(list.migDevices.map((d) => d.uuid)).toEqual(['MIG-3333']);
    expect(list.problems.map((p) => p.code)).toEqual([
      'NO_PARENT',
      'BAD_VALUE',
      'BAD_VALUE',
      'BAD_VALUE',
      'UNPARSED_LINE',
    ]);
    expect(list.problems.every((p) => p.source === 'nvidia-smi -L')).toBe(true);
  });

  it('keeps a hostile name to its limit and never lets it forge a second uuid', () => {
    const name = `${'A'.repeat(500)} (UUID: GPU-forged)`;
    const list = parseNvidiaList(`GPU 0: ${name} (UUID: GPU-real)\n`);
    expect(list.gpus[0]?.uuid).toBe('GPU-real');
    expect(list.gpus[0]?.name.length).toBeLessThanOrEqual(128);
  });
});

describe('parseGpuInstances (nvidia-smi mig -lgi)', () => {
  it('reads the 57-column variant', () => {
    expect(parseGpuInstances(LGI_57)).toEqual({
      rows: [
        {
          gpu_index: 0,
          profile: '3g.20gb',
          profile_id: 9,
          gpu_instance: 1,
          placement: { start: 4, size: 4 },
        },
        {
          gpu_index: 0,
          profile: '3g.20gb',
          profile_id: 9,
          gpu_instance: 2,
          placement: { start: 0, size: 4 },
        },
      ],
      problems: [],
    });
  });

  it('reads the older 54-column variant', () => {
    expect(parseGpuInstances(LGI_54).rows).toEqual([
      { gpu_index: 0, profile: '1g.5gb', profile_id: 19, gpu_instance: 13, placement: { start: 6, size: 1 } },
    ]);
  });

  it('reads "nothing to list" as no rows', () => {
    expect(parseGpuInstances('No GPU instances found: Not Found\n')).toEqual({ rows: [], problems: [] });
    expect(parseGpuInstances('No MIG-enabled devices found.\n')).toEqual({ rows: [], problems: [] });
  });

  it('reports a row it cannot read, a duplicate, and a stray line', () => {
    const parsed = parseGpuInstances(
      [
        '|   0  MIG 3g.20gb          9        x          4:4     |',
        '|   0  MIG 3g.20gb          9        1          4:4     |',
        '|   0  MIG 3g.20gb          9        1          0:4     |',
        '|   0  3g.20gb              9        2          0:4     |',
        '|   0  MIG 3g.20gb          9        3          0:4   extra |',
        'Insufficient Permissions',
      ].join('\n'),
    );
    expect(parsed.rows.map((r) => r.gpu_instance)).toEqual([1]);
    expect(parsed.problems.map((p) => p.code)).toEqual([
      'BAD_VALUE',
      'BAD_VALUE',
      'UNPARSED_LINE',
      'BAD_VALUE',
      'UNPARSED_LINE',
    ]);
  });
});

describe('parseComputeInstances (nvidia-smi mig -lci)', () => {
  it('reads whole and partial compute instances', () => {
    expect(parseComputeInstances(LCI)).toEqual({
      rows: [
        {
          gpu_index: 0,
          gpu_instance: 3,
          profile: '2g.20gb',
          profile_id: 1,
          compute_instance: 0,
          placement: { start: 0, size: 2 },
        },
        {
          gpu_index: 0,
          gpu_instance: 1,
          profile: '1c.3g.40gb',
          profile_id: 0,
          compute_instance: 1,
          placement: { start: 1, size: 1 },
        },
      ],
      problems: [],
    });
  });

  it('reports a -lgi row fed to it instead of reading it as a compute instance', () => {
    const parsed = parseComputeInstances('|   0  MIG 3g.20gb          9        1          4:4     |\n');
    expect(parsed.rows).toEqual([]);
    expect(parsed.problems[0]?.code).toBe('BAD_VALUE');
  });
});

describe('parseMigModeCsv', () => {
  it('reads Enabled, Disabled and not-supported cards', () => {
    const parsed = parseMigModeCsv(
      [
        '0, GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1, Enabled',
        '1, GPU-7c3cadbd-17e5-0913-f69b-c618122ea0cd, Disabled',
        '2, GPU-00000000-0000-4000-8000-000000000002, [N/A]',
        '3, GPU-00000000-0000-4000-8000-000000000003, [Not Supported]',
      ].join('\n'),
    );
    expect(parsed.problems).toEqual([]);
    expect(parsed.rows.map((r) => r.mode)).toEqual(['enabled', 'disabled', null, null]);
  });

  it('skips the header of --format=csv and reports an unknown mode', () => {
    const parsed = parseMigModeCsv('index, uuid, mig.mode.current\n0, GPU-a, Pending\n1, GPU-b, Enabled\n');
    expect(parsed.rows).toEqual([{ index: 1, uuid: 'GPU-b', mode: 'enabled' }]);
    expect(parsed.problems.map((p) => p.code)).toEqual(['MODE_UNKNOWN']);
  });

  it('reports rows with a missing uuid or extra fields', () => {
    const parsed = parseMigModeCsv('0, , Enabled\n1, GPU-b, Enabled, x\n');
    expect(parsed.rows).toEqual([]);
    expect(parsed.problems.map((p) => p.code)).toEqual(['BAD_VALUE', 'BAD_VALUE']);
  });
});

describe('parseMigDevicesTable (plain nvidia-smi)', () => {
  it('reads the older width and stops at the processes table', () => {
    expect(parseMigDevicesTable(DEVICES_OLD)).toEqual({
      rows: [
        {
          gpu_index: 0,
          gpu_instance: 2,
          compute_instance: 0,
          device: 0,
          memory_used_mib: 11,
          memory_total_mib: 20096,
        },
        {
          gpu_index: 0,
          gpu_instance: 9,
          compute_instance: 0,
          device: 1,
          memory_used_mib: 3,
          memory_total_mib: 4864,
        },
      ],
      problems: [],
    });
  });

  it('reads the newer width after the GPU table', () => {
    const parsed = parseMigDevicesTable(DEVICES_NEW);
    expect(parsed.problems).toEqual([]);
    expect(parsed.rows.map((r) => [r.gpu_instance, r.device, r.memory_total_mib])).toEqual([
      [1, 0, 40192],
      [13, 2, 9728],
    ]);
  });

  it('reads "No MIG devices found" and output without the section as no rows', () => {
    expect(parseMigDevicesTable('| MIG devices: |\n|  No MIG devices found  |\n').rows).toEqual([]);
    expect(parseMigDevicesTable('| GPU  Name |\n|   0  NVIDIA H100 |\n')).toEqual({ rows: [], problems: [] });
  });

  it('reports a row whose ids or memory it cannot read', () => {
    const parsed = parseMigDevicesTable(
      '| MIG devices: |\n|  0    x   0   0  |  1MiB / 10MiB |\n|  0    1   0   0  |  lots  |\n',
    );
    expect(parsed.problems.map((p) => p.code)).toEqual(['UNPARSED_LINE', 'BAD_VALUE']);
    expect(parsed.rows).toEqual([
      {
        gpu_index: 0,
        gpu_instance: 1,
        compute_instance: 0,
        device: 0,
        memory_used_mib: null,
        memory_total_mib: null,
      },
    ]);
  });
});

describe('parseMigMinors and parseCapabilityAccess', () => {
  it('reads the minors file', () => {
    const parsed = parseMigMinors(
      'config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\ngpu31/gi14/ci7/access 4322\n',
    );
    expect(parsed.problems).toEqual([]);
    expect(parsed.minors.get('gpu0/gi0/ci0/access')).toBe(4);
    expect(parsed.minors.get('gpu31/gi14/ci7/access')).toBe(4322);
  });

  it('reports odd lines and duplicates, keeping the first value', () => {
    const parsed = parseMigMinors('gpu0/gi1/access 12\ngpu0/gi1/access 99\ngpu0/gi2/access\n../x 5\n');
    expect(parsed.minors.get('gpu0/gi1/access')).toBe(12);
    expect(parsed.problems.map((p) => p.code)).toEqual(['DUPLICATE', 'UNPARSED_LINE', 'UNPARSED_LINE']);
  });

  it('reads DeviceFileMinor from an access file, and reports one without it', () => {
    expect(parseCapabilityAccess('DeviceFileMinor: 22\nDeviceFileMode: 292\nDeviceFileModify: 1\n')).toEqual({
      minor: 22,
    });
    expect(parseCapabilityAccess('DeviceFileMode: 292\n')).toMatchObject({
      problem: { code: 'UNPARSED_LINE' },
    });
    expect(parseCapabilityAccess('DeviceFileMinor: -1\n')).toMatchObject({ problem: { code: 'BAD_VALUE' } });
  });
});
