import { describe, expect, it } from 'vitest';
import { bwrapArgs, rehiddenBelow } from '../../../../worker/sandbox/bwrap.js';
import {
  type DataMount,
  declaredMountsProblem,
  mountPointOf,
  parseMount,
  resolveMounts,
  within,
} from '../../../../worker/task-io/mounts.js';

describe('--mount NAME=PATH[:ro|:rw]', () => {
  it('is read-only unless :rw is given', () => {
    expect(parseMount('imagenet-val=/srv/data/val')).toEqual({
      name: 'imagenet-val',
      host_path: '/srv/data/val',
      read_only: true,
    });
    expect(parseMount('scratch=/srv/scratch:rw')).toMatchObject({
      host_path: '/srv/scratch',
      read_only: false,
    });
    expect(parseMount('x=/a:ro')).toMatchObject({ host_path: '/a', read_only: true });
    expect(mountPointOf('imagenet-val')).toBe('/mnt/imagenet-val');
  });

  it('refuses relative paths and names that are not plain', () => {
    for (const bad of ['data=relative/path', 'Data=/x', '../x=/x', 'a/b=/x', '=/x', 'x'])
      expect(() => parseMount(bad)).toThrow(/--mount/);
  });
});

const ro = (name: string, host_path: string): DataMount => ({ name, host_path, read_only: true });
const rw = (name: string, host_path: string): DataMount => ({ name, host_path, read_only: false });

describe('declared mounts bind exactly the declared paths (docs/security.md "The task sandbox")', () => {
  it('accepts mounts apart from each other and from what the worker hides', () => {
    expect(
      declaredMountsProblem(
        [ro('models', '/srv/models'), rw('scratch', '/srv/scratch'), ro('home', '/home/shared')],
        ['/var/lib/gpu-broker'],
      ),
    ).toBeNull();
  });

  it('attack: refuses a mount inside a writable one, where a task could plant a symbolic link for the next', () => {
    expect(
      declaredMountsProblem([rw('scratch', '/srv/scratch'), ro('models', '/srv/scratch/models')], []),
    ).toMatch(/models=\/srv\/scratch\/models lies inside the writable mount scratch=\/srv\/scratch/);
    // the same path twice, once writable
    expect(declaredMountsProblem([rw('out', '/srv/out'), ro('out-ro', '/srv/out')], [])).toMatch(
      /inside the writable/,
    );
    // a read-only mount may hold another read-only one
    expect(declaredMountsProblem([ro('data', '/srv/data'), ro('val', '/srv/data/val')], [])).toBeNull();
  });

  it('refuses a path that is not canonical, or /', () => {
    for (const p of ['/srv/../run', '/srv/./x', '/srv//x', '/srv/x/', '/'])
      expect(declaredMountsProblem([ro('x', p)], []), p).toMatch(/canonical absolute path/);
  });

  it('refuses a name declared twice', () => {
    expect(declaredMountsProblem([ro('x', '/a'), ro('x', '/b')], [])).toMatch(/declared twice/);
  });

  it("refuses a mount inside the worker's hidden paths, and a writable one holding one", () => {
    expect(
      declaredMountsProblem([ro('w', '/var/lib/gpu-broker/executions')], ['/var/lib/gpu-broker']),
    ).toMatch(/lies inside the hidden path \/var\/lib\/gpu-broker/);
    expect(declaredMountsProblem([rw('all', '/var/lib')], ['/var/lib/gpu-broker'])).toMatch(
      /writable mount "all" \(\/var\/lib\) holds the hidden path/,
    );
    // read-only: the hidden path is covered again below /mnt/<name> (bwrap.ts)
    expect(declaredMountsProblem([ro('all', '/var/lib')], ['/var/lib/gpu-broker'])).toBeNull();
  });

  it("resolveMounts refuses a mount the policy's hidden paths reach into", () => {
    const offered = [ro('data', '/srv/data'), rw('out', '/srv/out')];
    expect(resolveMounts(['data'], offered, true, ['/srv'])).toMatch(
      /lies inside the policy's hidden path \/srv/,
    );
    expect(resolveMounts(['out'], offered, true, ['/srv/out/keys'])).toMatch(/writable mount "out"/);
    expect(resolveMounts(['data'], offered, true, ['/srv/data/keys'])).toEqual([
      { name: 'data', hostPath: '/srv/data', inside: '/mnt/data', readOnly: true },
    ]);
  });

  it('within is by path component, not by prefix', () => {
    expect(within('/srv/data', '/srv')).toBe(true);
    expect(within('/srv', '/srv')).toBe(true);
    expect(within('/srv-other', '/srv')).toBe(false);
  });
});

describe('hidden paths below a bind are covered again where the bind shows them', () => {
  it('maps each hidden path below a pinned dir or a mount to its path inside, outermost only', () => {
    const hidden = [
      { path: '/srv/data/keys', kind: 'dir' as const },
      { path: '/srv/data/keys/a', kind: 'file' as const },
      { path: '/opt/proj/.wd', kind: 'dir' as const },
      { path: '/srv/database', kind: 'dir' as const },
    ];
    expect(
      rehiddenBelow(hidden, [
        { hostPath: '/opt/proj', inside: '/opt/proj' },
        { hostPath: '/srv/data', inside: '/mnt/data' },
      ]),
    ).toEqual([
      { path: '/mnt/data/keys', kind: 'dir' },
      { path: '/opt/proj/.wd', kind: 'dir' },
    ]);
  });

  it('bwrapArgs covers them after the binds (a mount, then its hidden dir)', () => {
    const args = bwrapArgs({
      system: { dirs: ['/usr'], links: [] },
      taskDir: '/w/t/task',
      hidden: [
        { path: '/srv', kind: 'dir' },
        { path: '/srv/data/keys', kind: 'dir' },
      ],
      pinned: [],
      devices: [],
      network: 'none',
      identity: null,
      statusFd: null,
      argv: ['true'],
      mounts: [{ hostPath: '/srv/data', inside: '/mnt/data', readOnly: true }],
    }).join(' ');
    expect(args).toContain('--tmpfs /srv --proc');
    expect(args).not.toContain('--tmpfs /srv/data/keys');
    expect(args.indexOf('--tmpfs /mnt/data/keys')).toBeGreaterThan(
      args.indexOf('--ro-bind /srv/data /mnt/data'),
    );
  });
});
