import { describe, expect, it } from 'vitest';
import { COMMANDS } from '../../../src/cli/commands.js';
import { runCli, spawnCli } from '../../support/cli.js';

/**
 * docs/operations.md: every command and subcommand answers `--help` (exit 0, its flags, env vars and an
 * example), and an unknown flag or subcommand is one usage line on stderr with exit 2, never a stack.
 */

const invocations = Object.entries(COMMANDS).flatMap(([name, entry]) => [
  { name, entry, prefix: [] as string[] },
  ...(entry.spec.subcommands ?? []).map((sub) => ({ name: `${name} ${sub}`, entry, prefix: [sub] })),
]);

async function runEntry(name: string, args: string[]) {
  const command = name.split(' ')[0] ?? name;
  const entry = COMMANDS[command];
  if (!entry) throw new Error(`no command ${command}`);
  const { run } = await entry.load();
  return runCli(run, entry.passName ? [command, ...args] : args, {});
}

describe('gpu-broker COMMAND --help', () => {
  it.each(invocations)(
    '$name --help lists its flags, environment and an example',
    async ({ name, entry, prefix }) => {
      const out = await runEntry(name, [...prefix, '--help']);
      expect(out.code).toBe(0);
      expect(out.stderr).toBe('');
      for (const flag of Object.keys(entry.spec.flags)) expect(out.stdout).toContain(`--${flag}`);
      for (const env of Object.keys(entry.spec.env ?? {})) expect(out.stdout).toContain(env);
      expect(out.stdout).toMatch(/examples?:\n {2}gpu-broker /);
      expect((await runEntry(name, [...prefix, '-h'])).code).toBe(0);
    },
  );

  it.each(invocations)(
    '$name with an unknown flag is one usage line and exit 2',
    async ({ name, prefix }) => {
      const out = await runEntry(name, [...prefix, '--no-such-flag']);
      expect(out.code).toBe(2);
      expect(out.stdout).toBe('');
      expect(out.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(out.stderr).toContain('--no-such-flag');
      expect(out.stderr).toContain('--help');
    },
  );

  it.each(Object.entries(COMMANDS).filter(([, e]) => e.spec.subcommands))(
    '%s with an unknown subcommand is one usage line and exit 2',
    async (name) => {
      const out = await runEntry(name, ['frobnicate']);
      expect(out.code).toBe(2);
      expect(out.stderr.trimEnd().split('\n')).toHaveLength(1);
    },
  );
});

describe('the built CLI', () => {
  it('prints help without starting anything and fails an unknown flag without a stack trace', async () => {
    for (const args of [
      ['start', '--help'],
      ['review', '--help'],
      ['token', '--help'],
      ['review', 'list', '--help'],
    ]) {
      const out = await spawnCli(args, { env: { GPU_BROKER_URL: '' } });
      expect(out.code, args.join(' ')).toBe(0);
      expect(out.stdout).toContain(`usage: gpu-broker ${args[0]}`);
    }
    const bad = await spawnCli(['serve', '--bogus']);
    expect(bad.code).toBe(2);
    expect(bad.stderr.trimEnd().split('\n')).toEqual([
      "gpu-broker serve: unknown option '--bogus' (see: gpu-broker serve --help)",
    ]);
  });
});
