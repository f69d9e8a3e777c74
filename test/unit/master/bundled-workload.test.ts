import { describe, expect, it } from 'vitest';
import { workloadPath, workloadSha256 } from '../../../qualification/workload/location.js';
import { withBundledWorkload } from '../../../src/master/bundled-workload.js';
import { parseConfig } from '../../../src/platform/config.js';

describe('the bundled qualification workload in the policy', () => {
  it('is allowed under /usr/bin/python3 by default, pinned by the script sha256', () => {
    const policy = withBundledWorkload(parseConfig({})).policy;
    expect(policy.scripts).toEqual([
      { interpreter: '/usr/bin/python3', script: workloadPath(), sha256: workloadSha256() },
    ]);
    expect(policy.executables).toEqual([]);
  });

  it('runs under qualification_python when a GPU host keeps torch elsewhere', () => {
    const policy = withBundledWorkload(parseConfig({ qualification_python: '/opt/conda/bin/python' })).policy;
    expect(policy.scripts[0]?.interpreter).toBe('/opt/conda/bin/python');
  });

  it('is not added twice when the operator pinned the same script', () => {
    const own = { interpreter: '/opt/py/bin/python', script: workloadPath(), sha256: workloadSha256() };
    const policy = withBundledWorkload(parseConfig({ policy: { scripts: [own] } })).policy;
    expect(policy.scripts).toEqual([own]);
  });

  it('refuses a relative interpreter', () => {
    expect(() => parseConfig({ qualification_python: 'python3' })).toThrow(/qualification_python/);
  });
});
