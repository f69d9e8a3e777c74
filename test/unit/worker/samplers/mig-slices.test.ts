import { describe, expect, it } from 'vitest';
import {
  parseComputeInstances,
  parseGpuInstances,
  parseMigDevicesTable,
  parseMigMinors,
  parseMigModeCsv,
  parseNvidiaList,
} from '../../../../worker/samplers/mig-parse.js';
import {
  findMigProfile,
  MIG_PROFILES,
  migCardModel,
  parseMigProfileName,
} from '../../../../worker/samplers/mig-profiles.js';
import { joinMigSlices, type MigDiscovery } from '../../../../worker/samplers/mig-slices.js';

// An A100-80GB in MIG mode with a 3g.40gb (GI 2) and a 2g.20gb (GI 3), beside a whole card: the shapes
// of the public formats in gpu-tools.md, with GI ids that are not the device numbers, so a join by
// position would be caught.
const LIST = `GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-9c73eb7b-8d6d-6c0e-dc13-97873e2ede40)
  MIG 3g.40gb     Device  0: (UUID: MIG-a686709d-6dc2-542a-8851-0d2508448c10)
  MIG 2g.20gb     Device  1: (UUID: MIG-53864714-0a66-5df2-9007-9268e30d9a72)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-1d2a2ee6-0b5a-4f34-b16c-f8a3c2f0b1d7)
`;
const MODES = `0, GPU-9c73eb7b-8d6d-6c0e-dc13-97873e2ede40, Enabled
1, GPU-1d2a2ee6-0b5a-4f34-b16c-f8a3c2f0b1d7, Disabled
`;
const LGI = `|   0  MIG 2g.20gb         14        3          0:2     |
|   0  MIG 3g.40gb          9        2          4:4     |
`;
const LCI = `|   0      3       MIG 2g.20gb          1         0          0:2     |
|   0      2       MIG 3g.40gb          2         0          0:3     |
`;
const DEVICES = `| MIG devices: |
|  0    2   0   0  |     11MiB / 40192MiB | 42      0 |  3   0    2    0    0 |
|  0    3   0   1  |      7MiB / 19968MiB | 28      0 |  2   0    1    0    0 |
`;
// gpuN/giM/access = 3 + 135N + 9M, ciK = that + 1 + K (the driver's numbering, gpu-tools.md).
const MINORS =
  'config 1\nmonitor 2\ngpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\ngpu0/gi3/access 30\ngpu0/gi3/ci0/access 31\n';

function discovery(overrides: Partial<MigDiscovery> = {}): MigDiscovery {
  return {
    list: parseNvidiaList(LIST),
    modes: parseMigModeCsv(MODES).rows,
    gpuInstances: parseGpuInstances(LGI).rows,
    computeInstances: parseComputeInstances(LCI).rows,
    devices: parseMigDevicesTable(DEVICES).rows,
    minors: parseMigMinors(MINORS).minors,
    ...overrides,
  };
}

describe('joinMigSlices', () => {
  it('makes one slice per compute instance, with its device uuid, memory and both capability minors', () => {
    const joined = joinMigSlices(discovery());
    expect(joined.problems).toEqual([]);
    expect(joined.migCards).toEqual([0]);
    expect(joined.slices).toEqual([
      {
        id: '0:mig:2/0',
        parent_index: 0,
        parent_uuid: 'GPU-9c73eb7b-8d6d-6c0e-dc13-97873e2ede40',
        parent_name: 'NVIDIA A100-SXM4-80GB',
        parent_model: 'A100-80GB',
        gpu_instance: 2,
        compute_instance: 0,
        profile: '3g.40gb',
        gpu_instance_profile: '3g.40gb',
        compute_slices: 3,
        memory_total_mib: 40192,
        memory_used_mib: 11,
        memory_source: 'instance',
        mig_uuid: 'MIG-a686709d-6dc2-542a-8851-0d2508448c10',
        gi_access_minor: 21,
        ci_access_minor: 22,
      },
      expect.objectContaining({
        id: '0:mig:3/0',
        profile: '2g.20gb',
        mig_uuid: 'MIG-53864714-0a66-5df2-9007-9268e30d9a72',
        memory_total_mib: 19968,
        gi_access_minor: 30,
        ci_access_minor: 31,
      }),
    ]);
  });

  it('without the MIG devices table, takes memory from the model table and reports the unmapped uuids', () => {
    const joined = joinMigSlices(discovery({ devices: null }));
    expect(joined.slices.map((s) => [s.id, s.mig_uuid, s.memory_total_mib, s.memory_source])).toEqual([
      ['0:mig:2/0', null, 40192, 'profile-table'],
      ['0:mig:3/0', null, 19968, 'profile-table'],
    ]);
    expect(joined.problems.map((p) => p.code)).toEqual([
      'UNMAPPED_DEVICE',
      'UNMAPPED_DEVICE',
      'NO_DEVICE',
      'NO_DEVICE',
    ]);
  });

  it('maps R450 uuids by their own /gi/ci', () => {
    const list = parseNvidiaList(
      `GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-9c73eb7b-8d6d-6c0e-dc13-97873e2ede40)
  MIG 2g.20gb Device 0: (UUID: MIG-GPU-9c73eb7b-8d6d-6c0e-dc13-97873e2ede40/3/0)
  MIG 3g.40gb Device 1: (UUID: MIG-GPU-9c73eb7b-8d6d-6c0e-dc13-97873e2ede40/2/0)
`,
    );
    const joined = joinMigSlices(discovery({ list, devices: [] }));
    expect(joined.problems).toEqual([]);
    expect(joined.slices.map((s) => [s.id, s.mig_uuid])).toEqual([
      ['0:mig:2/0', 'MIG-GPU-9c73eb7b-8d6d-6c0e-dc13-97873e2ede40/2/0'],
      ['0:mig:3/0', 'MIG-GPU-9c73eb7b-8d6d-6c0e-dc13-97873e2ede40/3/0'],
    ]);
  });

  it('leaves a minor it has not got null and says so (the slice must not be bound)', () => {
    const joined = joinMigSlices(discovery({ minors: null }));
    expect(joined.slices.every((s) => s.gi_access_minor === null && s.ci_access_minor === null)).toBe(true);
    expect(joined.problems.map((p) => p.code)).toEqual(['NO_MINOR', 'NO_MINOR']);
  });

  it('reports a compute instance of a card not in MIG mode or without its GPU instance, and drops it', () => {
    const lci = parseComputeInstances(
      `${LCI}|   1      1       MIG 1g.10gb          0         0          0:1     |\n|   0      9       MIG 1g.10gb          0         0          0:1     |\n`,
    ).rows;
    const joined = joinMigSlices(discovery({ computeInstances: lci }));
    expect(joined.slices).toHaveLength(2);
    expect(joined.problems.map((p) => p.code)).toEqual(['NO_PARENT', 'NO_GPU_INSTANCE']);
  });

  it('reports a profile the model does not have, keeping the printed memory', () => {
    const lgi = parseGpuInstances(
      '|   0  MIG 3g.20gb          9        2          4:4     |\n|   0  MIG 2g.20gb         14        3          0:2     |\n',
    ).rows;
    const joined = joinMigSlices(discovery({ gpuInstances: lgi }));
    expect(joined.problems.map((p) => p.code)).toEqual(['UNKNOWN_PROFILE']);
    expect(joined.slices[0]?.memory_total_mib).toBe(40192);
  });

  it('refuses ids outside the driver’s ranges and profile names that are not profiles', () => {
    const enabled = parseMigModeCsv('0, GPU-a, Enabled\n300, GPU-b, Enabled\n').rows;
    const lgi = parseGpuInstances(
      '|   0  MIG 1g.10gb         19       15          0:1     |\n|   0  MIG x;y             19        4          0:1     |\n|   0  MIG 1g.10gb         19        5          1:1     |\n|   300  MIG 1g.10gb         19        5          1:1     |\n',
    ).rows;
    const lci = parseComputeInstances(
      '|   0     15       MIG 1g.10gb          0         0          0:1     |\n|   0      4       MIG 1g.10gb          0         0          0:1     |\n|   0      5       MIG 1g.10gb          0         8          0:1     |\n|   300    5       MIG 1g.10gb          0         0          0:1     |\n',
    ).rows;
    const joined = joinMigSlices(discovery({ modes: enabled, gpuInstances: lgi, computeInstances: lci }));
    expect(joined.slices).toEqual([]);
    expect(joined.problems.filter((p) => p.source === 'join').map((p) => p.code)).toEqual([
      'BAD_VALUE',
      'UNKNOWN_PROFILE',
      'BAD_VALUE',
      'BAD_VALUE',
      'NO_DEVICE',
      'NO_DEVICE',
    ]);
  });

  it('gives a model without a table no memory unless the tool printed one', () => {
    const list = parseNvidiaList(LIST.replaceAll('A100-SXM4-80GB', 'H100 NVL'));
    const joined = joinMigSlices(discovery({ list, devices: null }));
    expect(joined.slices.map((s) => [s.parent_model, s.memory_total_mib])).toEqual([
      [null, null],
      [null, null],
    ]);
    expect(joined.problems.filter((p) => p.code === 'NO_MEMORY')).toHaveLength(2);
  });
});

describe('MIG profiles per card model', () => {
  it('tells the models apart by name and memory', () => {
    expect(migCardModel('NVIDIA A100-SXM4-40GB')).toBe('A100-40GB');
    expect(migCardModel('A100-SXM4-40GB')).toBe('A100-40GB');
    expect(migCardModel('NVIDIA A100 80GB PCIe')).toBe('A100-80GB');
    expect(migCardModel('NVIDIA A100-PCIE', 81920)).toBe('A100-80GB');
    expect(migCardModel('NVIDIA H100 80GB HBM3')).toBe('H100-80GB');
    expect(migCardModel('NVIDIA H100 PCIe', 81559)).toBe('H100-80GB');
    expect(migCardModel('NVIDIA H200')).toBe('H200');
    expect(migCardModel('NVIDIA H100 NVL')).toBeNull();
    expect(migCardModel('NVIDIA GH200 480GB')).toBeNull();
    expect(migCardModel('NVIDIA A30')).toBeNull();
    expect(migCardModel('NVIDIA A100-PCIE')).toBeNull();
  });

  it('names each board’s profiles as NVIDIA does, with -lgip memory', () => {
    const names = (model: keyof typeof MIG_PROFILES) => MIG_PROFILES[model].map((p) => p.name);
    expect(names('A100-40GB')).toEqual([
      '1g.5gb',
      '1g.5gb+me',
      '1g.10gb',
      '2g.10gb',
      '3g.20gb',
      '4g.20gb',
      '7g.40gb',
    ]);
    expect(names('A100-80GB')).toEqual([
      '1g.10gb',
      '1g.10gb+me',
      '1g.20gb',
      '2g.20gb',
      '3g.40gb',
      '4g.40gb',
      '7g.80gb',
    ]);
    expect(names('H100-80GB')).toEqual(names('A100-80GB'));
    expect(names('H200')).toEqual([
      '1g.18gb',
      '1g.18gb+me',
      '1g.35gb',
      '2g.35gb',
      '3g.71gb',
      '4g.71gb',
      '7g.141gb',
    ]);
    expect(findMigProfile('A100-40GB', '1g.5gb')?.memory_mib).toBe(4864);
    expect(findMigProfile('A100-80GB', '1g.10gb')?.memory_mib).toBe(9728);
    expect(findMigProfile('H100-80GB', '1g.10gb')?.memory_mib).toBe(9984);
    expect(findMigProfile('H200', '1g.18gb')).toMatchObject({
      id: 19,
      memory_mib: 16384,
      memory_verified: true,
    });
    expect(findMigProfile('H200', '3g.71gb')).toMatchObject({
      id: 9,
      memory_mib: 66560,
      memory_verified: false,
    });
    expect(findMigProfile('H100-80GB', '1g.5gb')).toBeNull();
  });

  it('parses profile names, including compute-instance and media-extension forms', () => {
    expect(parseMigProfileName('1c.3g.40gb')).toEqual({
      compute_slices: 1,
      gpu_slices: 3,
      nominal_gb: 40,
      gpu_instance_profile: '3g.40gb',
    });
    expect(parseMigProfileName('1g.10gb+me')?.gpu_instance_profile).toBe('1g.10gb+me');
    for (const bad of ['', '3g', '4c.3g.40gb', '9g.10gb', '1g.10gb; rm -rf /', 'MIG 1g.10gb']) {
      expect(parseMigProfileName(bad)).toBeNull();
    }
  });
});
