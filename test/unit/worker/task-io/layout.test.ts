import { describe, expect, it } from 'vitest';
import { inputEntries, taskLayout } from '../../../../worker/task-io/layout.js';
import { resolveMounts } from '../../../../worker/task-io/mounts.js';

/** The execution layout both executors share (worker/task-io/layout.ts) and the mounts they resolve. */

describe('taskLayout', () => {
  it('places inputs beside the task dir in a sandbox, and in it otherwise', () => {
    expect(taskLayout('/x/e1', true)).toEqual({
      taskDir: '/x/e1/task',
      inputsDir: '/x/e1/inputs',
      dirs: { execDir: '/task', outputDir: '/task/out', tmpDir: '/tmp' },
      sandboxed: true,
    });
    expect(taskLayout('/x/e1', false)).toEqual({
      taskDir: '/x/e1/task',
      inputsDir: '/x/e1/task',
      dirs: { execDir: '/x/e1/task', outputDir: '/x/e1/task/out', tmpDir: '/x/e1/task/tmp' },
      sandboxed: false,
    });
  });

  it('binds each top-level input entry once, sorted', () => {
    const file = (path: string) => ({ path, sha256: 'a'.repeat(64), size: 1 });
    expect(inputEntries([file('src/b.py'), file('README'), file('src/a.py')])).toEqual(['README', 'src']);
  });
});

describe('resolveMounts', () => {
  const offered = [
    { name: 'data', host_path: '/srv/data', read_only: true },
    { name: 'scratch', host_path: '/srv/scratch', read_only: false },
  ];

  it('binds exactly the mounts asked for, at /mnt/<name>', () => {
    expect(resolveMounts(['scratch'], offered, true)).toEqual([
      { name: 'scratch', hostPath: '/srv/scratch', inside: '/mnt/scratch', readOnly: false },
    ]);
  });

  it('refuses a mount not offered, and any mount without the sandbox', () => {
    expect(resolveMounts(['other'], offered, true)).toBe('mount "other" is not offered by this worker');
    expect(resolveMounts(['data'], offered, false)).toBe(
      'mount "data" needs the sandbox; this worker runs with --isolation none',
    );
  });
});
