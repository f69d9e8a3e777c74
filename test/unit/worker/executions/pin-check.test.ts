import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { pinnedFiles } from '../../../../src/broker/loops/pass-apply.js';
import { PolicySchema } from '../../../../src/contracts/policy.js';
import { pinsProblem } from '../../../../worker/executions/pin-check.js';

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

describe('sha256 pins checked on the worker', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pins-'));
  const file = join(dir, 'run.sh');
  writeFileSync(file, 'echo hi\n');

  it('accepts matching pins and no pins', () => {
    expect(pinsProblem([])).toBeNull();
    expect(pinsProblem([{ path: file, sha256: sha('echo hi\n') }])).toBeNull();
  });

  it('names a file whose bytes differ on this host', () => {
    expect(pinsProblem([{ path: file, sha256: sha('something else') }])).toMatch(
      /run\.sh has sha256 .* policy pins/,
    );
  });

  it('names a pinned file that is missing', () => {
    expect(pinsProblem([{ path: join(dir, 'gone'), sha256: sha('x') }])).toMatch(
      /cannot be read on this worker: ENOENT/,
    );
  });

  it('the master sends the pins that apply to the argv', () => {
    const policy = PolicySchema.parse({
      executables: [{ path: '/opt/run', sha256: sha('a') }, { path: '/bin/sh' }],
      scripts: [{ interpreter: '/usr/bin/python3', script: '/opt/q.py', sha256: sha('b') }],
    });
    expect(pinnedFiles(['/opt/run', 'x'], policy)).toEqual([{ path: '/opt/run', sha256: sha('a') }]);
    expect(pinnedFiles(['/bin/sh', '-c', 'true'], policy)).toEqual([]);
    expect(pinnedFiles(['/usr/bin/python3', '/opt/q.py'], policy)).toEqual([
      { path: '/opt/q.py', sha256: sha('b') },
    ]);
  });
});
