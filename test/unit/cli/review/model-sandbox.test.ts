import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  checkedBinds,
  MODEL_PATH,
  MODEL_UID,
  modelEnv,
  modelSandboxArgs,
  sandboxedModel,
  secretPaths,
} from '../../../../src/cli/review/model-sandbox.js';
import { BrokerError } from '../../../../src/contracts/errors.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

/** ADR 0041: what the agent reviewer's model sandbox is made of (src/cli/review/model-sandbox.ts). */

afterAll(() => removeTempDirs());

const codeOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    return err instanceof BrokerError ? err.code : String(err);
  }
  return null;
};

describe('modelEnv', () => {
  const parent = { ANTHROPIC_API_KEY: 'sk-1', GPU_BROKER_TOKEN: 'gpb_x', HOME: '/root', SECRET: 's' };

  it('is an allowlist: the fixed names and those asked for, nothing else of the parent', () => {
    expect(modelEnv(parent, ['ANTHROPIC_API_KEY'], '/task')).toEqual({
      PATH: MODEL_PATH,
      HOME: '/task',
      TMPDIR: '/tmp',
      LANG: 'C.UTF-8',
      ANTHROPIC_API_KEY: 'sk-1',
    });
  });

  it('refuses a variable of another name whose value holds a gpu-broker token (fresh-eyes review)', () => {
    const token = `gpb_${'A1b2C3d4'.repeat(5)}xyz`;
    for (const value of [token, `Bearer ${token}`, Buffer.from(token).toString('base64')])
      expect(
        codeOf(() => modelEnv({ REVIEW_TOKEN: value }, ['REVIEW_TOKEN'], '/task')),
        value,
      ).toBe('INVALID_INPUT');
  });

  it('refuses GPU_BROKER_* names (any case), malformed names and names not set', () => {
    for (const name of ['GPU_BROKER_TOKEN', 'gpu_broker_token_file', 'GPU_BROKER_URL', 'A=B', '', 'MISSING'])
      expect(
        codeOf(() => modelEnv(parent, [name], '/task')),
        name,
      ).toBe('INVALID_INPUT');
  });
});

describe('secretPaths and checkedBinds', () => {
  const root = makeTempDir('model-binds');
  const home = join(root, 'home');
  const cwd = join(root, 'project');
  const kit = join(root, 'kit');
  for (const d of [join(home, '.gpu-broker'), join(cwd, '.gpu-broker'), kit, join(root, 'etc')])
    mkdirSync(d, { recursive: true });
  writeFileSync(join(root, 'etc', 'reviewer.token'), 'gpb_x');
  const secrets = secretPaths({
    tokenFile: '../etc/reviewer.token',
    cwd,
    env: { HOME: home, GPU_BROKER_HOME: '/srv/gpu-broker' },
  });

  it('names the token file, the data dirs of the cwd, HOME and GPU_BROKER_HOME', () => {
    expect(secrets).toEqual(
      expect.arrayContaining([
        join(root, 'etc', 'reviewer.token'),
        join(cwd, '.gpu-broker'),
        join(cwd, '.gpu-broker-worker'),
        join(home, '.gpu-broker'),
        join(home, '.config', 'gpu-broker'),
        '/srv/gpu-broker',
      ]),
    );
  });

  it('names the token file’s dir (its siblings: the operator and agent tokens), never a system dir', () => {
    expect(secrets).toContain(join(root, 'etc'));
    for (const [file, dir] of [
      ['/etc/reviewer.token', '/etc'],
      ['/var/reviewer.token', '/var'],
      ['/usr/bin/reviewer.token', '/usr/bin'],
      ['/var/lib/reviewer.token', '/var/lib'],
    ] as const)
      expect(secretPaths({ tokenFile: file, cwd: '/', env: {} }), file).not.toContain(dir);
    expect(secretPaths({ tokenFile: '/var/tmp/team/reviewer.token', cwd: '/', env: {} })).toContain(
      '/var/tmp/team',
    );
  });

  it('lets a bind through that holds none of them', () => {
    expect(checkedBinds([kit], secrets, home)).toEqual([kit]);
  });

  it('refuses a bind holding a secret, inside one, above a home dir, relative or missing', () => {
    for (const bind of [
      join(root, 'etc'),
      cwd,
      join(home, '.gpu-broker'),
      home,
      root,
      '/',
      '/home',
      'kit',
      join(root, 'nope'),
    ])
      expect(
        codeOf(() => checkedBinds([bind], secrets, home)),
        bind,
      ).toBe('INVALID_INPUT');
  });
});

describe('modelSandboxArgs', () => {
  const root = makeTempDir('model-args');
  const sys = join(root, 'sys');
  mkdirSync(join(sys, 'gpu-broker'), { recursive: true });
  writeFileSync(join(sys, 'reviewer.token'), 'gpb_x');
  const base = {
    system: { dirs: [sys], links: [] },
    secrets: [join(sys, 'reviewer.token'), join(sys, 'gpu-broker'), '/elsewhere/.gpu-broker'],
    binds: [],
    network: 'none' as const,
    setpriv: '/usr/bin/setpriv',
    scratch: join(root, 'scratch'),
    command: 'claude -p',
  };
  const pairs = (args: string[], flag: string) => args.flatMap((a, i) => (a === flag ? [args[i + 1]] : []));

  it('a root loop: its own PID, IPC, UTS and network namespaces, the model as nobody with no capabilities', () => {
    const args = modelSandboxArgs(base);
    for (const flag of [
      '--unshare-pid',
      '--unshare-ipc',
      '--unshare-uts',
      '--unshare-net',
      '--die-with-parent',
      '--new-session',
    ])
      expect(args).toContain(flag);
    expect(args).not.toContain('--unshare-user');
    const cmd = args.slice(args.indexOf('--chdir') + 3);
    expect(cmd).toEqual([
      '/usr/bin/setpriv',
      `--reuid=${MODEL_UID}`,
      `--regid=${MODEL_UID}`,
      '--clear-groups',
      '--inh-caps=-all',
      '--bounding-set=-all',
      '--no-new-privs',
      '--',
      '/bin/sh',
      '-c',
      'claude -p',
    ]);
    expect(pairs(args, '--chdir')).toEqual(['/task']);
    expect(pairs(args, '--bind')).toEqual([base.scratch]);
  });

  it('hides the secrets that lie inside what it binds (a file by /dev/null, a dir by a tmpfs), with /root and /home', () => {
    const args = modelSandboxArgs(base);
    expect(args.join(' ')).toContain(`--ro-bind /dev/null ${join(sys, 'reviewer.token')}`);
    expect(pairs(args, '--tmpfs')).toEqual(
      expect.arrayContaining([join(sys, 'gpu-broker'), '/root', '/home', '/tmp']),
    );
    expect(args.join(' ')).not.toContain('/elsewhere');
  });

  it('another loop: a user namespace; host network only when asked; binds read-only at their own path', () => {
    const args = modelSandboxArgs({ ...base, setpriv: null, network: 'host', binds: ['/opt/kit'] });
    expect(args).toContain('--unshare-user');
    expect(args).not.toContain('--unshare-net');
    expect(args.slice(args.indexOf('--chdir') + 3)).toEqual(['/bin/sh', '-c', 'claude -p']);
    expect(args.join(' ')).toContain('--ro-bind /opt/kit /opt/kit');
  });

  it('puts no environment on the command line: the model env is bwrap’s own (ps shows argv)', () => {
    const args = modelSandboxArgs(base);
    expect(args).not.toContain('--setenv');
    expect(args.filter((a) => /^[A-Za-z_][A-Za-z0-9_]*=/.test(a))).toEqual([]);
  });
});

describe('sandboxedModel', () => {
  it('refuses to start without bubblewrap, naming what to install and the flag that opts out', async () => {
    const err = await sandboxedModel({
      command: 'true',
      timeoutMs: 1000,
      network: 'none',
      binds: [],
      envNames: [],
      parentEnv: {},
      cwd: '/',
      tokenFile: undefined,
      root: false,
      helperPath: '/nonexistent',
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BrokerError);
    expect(err).toMatchObject({ code: 'UNAVAILABLE' });
    expect((err as BrokerError).message).toContain('apt-get install bubblewrap');
    expect((err as BrokerError).hint).toContain('--unsandboxed-model');
  });
});
