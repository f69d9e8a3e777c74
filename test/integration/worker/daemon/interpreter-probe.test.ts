import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../../../src/platform/package-root.js';
import { probeInterpreter } from '../../../../worker/daemon/interpreter-probe.js';

/**
 * The qualification preflight's probe (docs/operations.md) against real interpreters: python3 with site
 * switched off (torch never imports), python3 with a torch stub on its path, and a path that does not
 * exist. The probe never throws: every case is a result the master can store.
 */

const pythons = join(packageRoot(), 'test', 'fixtures', 'bin-python');

describe('probeInterpreter', () => {
  it('reports a python that cannot import torch, with the import error', async () => {
    const python = join(pythons, 'python-no-torch');
    expect(await probeInterpreter(python)).toEqual({
      python,
      torch_version: null,
      backend: null,
      error: "ModuleNotFoundError: No module named 'torch'",
    });
  });

  it('reports torch’s version and gloo where torch sees no CUDA device', async () => {
    const python = join(pythons, 'python-fake-torch');
    expect(await probeInterpreter(python)).toEqual({
      python,
      torch_version: '2.0.0+fake',
      backend: 'gloo',
      error: null,
    });
  });

  it('reports an interpreter that does not exist', async () => {
    const result = await probeInterpreter('/nonexistent/python3');
    expect(result.torch_version).toBeNull();
    expect(result.error).toContain('ENOENT');
  });
});
