import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { decisionLine } from '../../../../src/cli/agent/run.js';
import { collectRunFiles, taskArgv } from '../../../../src/cli/agent/run-submit.js';
import { shipNotice } from '../../../../src/cli/agent/ship-listing.js';
import { memoryFile, memoryRoot, readDirMemory, rememberRun } from '../../../../src/cli/agent/ship-memory.js';
import { LogReader, RUN_EXIT, signalExitCode, taskExitCode } from '../../../../src/cli/agent/task-follow.js';
import { downloadOutputs, outputTarget } from '../../../../src/cli/agent/task-outputs.js';
import type { MasterClient } from '../../../../src/cli/common/master-client.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

/** The pure pieces of `gpu-broker run` / `task` (ADR 0026), and what a hostile master could send. */

afterAll(() => removeTempDirs());

/** A MasterClient answering GETs from a function: the edge faked, as a hostile or broken master. */
function clientAnswering(get: (path: string) => unknown): MasterClient {
  return {
    get: async <T>(path: string) => get(path) as T,
    post: async () => {
      throw new Error('unexpected POST');
    },
    putBytes: async () => {
      throw new Error('unexpected PUT');
    },
    close: async () => undefined,
  };
}

const ended = (over: Partial<Parameters<typeof taskExitCode>[0]>) =>
  taskExitCode({ state: 'FAILED', failure_reason: null, exit_code: null, signal: null, ...over });

describe('exit codes', () => {
  it.each([
    [{ state: 'COMPLETED', exit_code: 0 }, 0],
    [{ failure_reason: 'EXIT_NONZERO', exit_code: 3 }, 3],
    [{ failure_reason: 'EXIT_NONZERO', exit_code: 256 }, 1],
    [{ failure_reason: 'KILLED_BY_SIGNAL', signal: 'SIGKILL' }, 137],
    [{ failure_reason: 'OOM_KILLED', signal: 'SIGKILL' }, 137],
    [{ failure_reason: 'TIMED_OUT', signal: 'SIGKILL' }, RUN_EXIT.TIMED_OUT],
    [{ failure_reason: 'SETUP_FAILED' }, RUN_EXIT.FAILED_NO_EXIT],
    [{ failure_reason: 'OUTPUT_MISSING', exit_code: 0 }, RUN_EXIT.FAILED_NO_EXIT],
    [{ failure_reason: 'WORKER_LOST' }, RUN_EXIT.FAILED_NO_EXIT],
    [{ state: 'CANCELLED' }, RUN_EXIT.CANCELLED],
    [{ state: 'RECONCILIATION_REQUIRED' }, RUN_EXIT.FAILED_NO_EXIT],
  ] as const)('%j → %i', (over, code) => {
    expect(ended(over)).toBe(code);
  });

  it('maps signals by name or number, and an unknown one to nothing', () => {
    expect(signalExitCode('SIGTERM')).toBe(143);
    expect(signalExitCode('9')).toBe(137);
    expect(signalExitCode('SIGBOGUS')).toBeUndefined();
    expect(signalExitCode(null)).toBeUndefined();
  });
});

describe('what run says after confirm', () => {
  it('names the grant that covers it, or the failing clause, escaped', () => {
    expect(
      decisionLine({
        proposal_id: 'p',
        revision_id: 'r',
        state: 'APPROVED',
        next_action: '',
        grant: { covered: true, grant_id: 'grant_1' },
      }),
    ).toBe('covered by grant grant_1 — starting');
    // A grant that covers it while the answer still says IN_REVIEW (approval applied a moment later).
    expect(
      decisionLine({
        proposal_id: 'p',
        revision_id: 'r',
        state: 'IN_REVIEW',
        next_action: '',
        grant: { covered: true, grant_id: 'grant_2' },
      }),
    ).toBe('covered by grant grant_2 — starting');
    const waiting = decisionLine({
      proposal_id: 'p',
      revision_id: 'r',
      state: 'IN_REVIEW',
      next_action: '',
      grant: {
        covered: false,
        grant_id: 'grant_1',
        failing: { clause: 'cards', message: 'cards 8 > 4\x1b[2J' },
      },
    });
    expect(waiting).toContain('waiting for review by');
    expect(waiting).toContain('grant grant_1 does not cover it: cards 8 > 4\\x1b[2J');
  });

  it('turns a bare program name into /usr/bin/NAME and keeps paths', () => {
    expect(taskArgv(['python3', 'train.py'])).toEqual(['/usr/bin/python3', 'train.py']);
    expect(taskArgv(['/bin/sh', 'x.sh'])).toEqual(['/bin/sh', 'x.sh']);
  });
});

describe('what run ships and remembers', () => {
  it('never ships .gpu-broker/ (tokens live there), node_modules/, .git/ or downloaded outputs', () => {
    const dir = makeTempDir('ship');
    for (const d of ['.gpu-broker', 'node_modules/x', '.git', 'gpu-broker-outputs/task_1', 'src'])
      mkdirSync(join(dir, d), { recursive: true });
    writeFileSync(join(dir, '.gpu-broker', 'operator.token'), 'secret');
    writeFileSync(join(dir, 'node_modules', 'x', 'i.js'), '');
    writeFileSync(join(dir, '.git', 'HEAD'), '');
    writeFileSync(join(dir, 'gpu-broker-outputs', 'task_1', 'm.json'), '{}');
    writeFileSync(join(dir, 'src', 'train.py'), 'print(1)\n');
    expect(collectRunFiles(dir, {}).files.map((f) => f.path)).toEqual(['src/train.py']);
  });

  it('refuses a --dir that is not a directory as bad input', () => {
    expect(() => collectRunFiles('/nonexistent/x', {})).toThrow(/is not a directory/);
    try {
      collectRunFiles('/nonexistent/x', {});
    } catch (err) {
      expect(err).toMatchObject({ code: 'INVALID_INPUT' });
    }
  });

  it('remembers one proposal per master URL, per user, outside DIR, and survives a damaged memory', () => {
    const env = { XDG_STATE_HOME: makeTempDir('state') };
    const dir = makeTempDir('memory');
    rememberRun(env, dir, { shipped: ['a.py'], url: 'https://a:1', proposalId: 'prop_a' });
    rememberRun(env, dir, { shipped: ['a.py'], url: 'https://b:2', proposalId: 'prop_b' });
    expect(readDirMemory(env, dir)).toEqual({
      proposals: { 'https://a:1': 'prop_a', 'https://b:2': 'prop_b' },
      shipped: ['a.py'],
    });
    expect(readdirSync(dir)).toEqual([]);
    expect(memoryFile(env, dir).startsWith(memoryRoot(env))).toBe(true);
    expect(statSync(memoryFile(env, dir)).mode & 0o077).toBe(0);
    writeFileSync(memoryFile(env, dir), '{not json');
    expect(readDirMemory(env, dir)).toBeUndefined();
    rememberRun(env, dir, { shipped: [], url: 'https://a:1', proposalId: 'prop_c' });
    expect(readDirMemory(env, dir)?.proposals).toEqual({ 'https://a:1': 'prop_c' });
  });

  it('never reads a .gpu-broker/run.json that came with the repository (docs/security.md "gpu-broker run on the submitter’s machine")', () => {
    const env = { XDG_STATE_HOME: makeTempDir('state') };
    const dir = makeTempDir('planted');
    mkdirSync(join(dir, '.gpu-broker'));
    // As an attacker would commit it: a proposal to revise or withdraw, and "seen" marks.
    writeFileSync(
      join(dir, '.gpu-broker', 'run.json'),
      JSON.stringify({ version: 2, proposals: { 'https://a:1': 'prop_victim' }, shipped: ['train.py'] }),
    );
    writeFileSync(join(dir, 'train.py'), '');
    expect(readDirMemory(env, dir)).toBeUndefined();
    const notice = shipNotice(dir, collectRunFiles(dir, {}), readDirMemory(env, dir));
    expect(notice[0]).toContain('first run from this directory');
    expect(notice.join('\n')).toContain('train.py');
  });

  it('treats a directory re-created at the same path (another inode) as a first run', () => {
    const env = { XDG_STATE_HOME: makeTempDir('state') };
    const parent = makeTempDir('recreated');
    const dir = join(parent, 'proj');
    mkdirSync(dir);
    rememberRun(env, dir, { shipped: ['train.py'], url: 'https://a:1', proposalId: 'prop_a' });
    expect(readDirMemory(env, dir)).toBeDefined();
    renameSync(dir, join(parent, 'old'));
    mkdirSync(dir);
    expect(readDirMemory(env, dir)).toBeUndefined();
  });

  it('names the files not shipped before on a later run, escaped', () => {
    const dir = makeTempDir('later');
    writeFileSync(join(dir, 'train.py'), '');
    writeFileSync(join(dir, 'new\x1b[2J.py'), '');
    const c = collectRunFiles(dir, {});
    expect(shipNotice(dir, c, { proposals: {}, shipped: ['train.py'] })).toEqual([
      '1 file(s) not shipped before: new\\x1b[2J.py',
    ]);
    expect(shipNotice(dir, c, { proposals: {}, shipped: ['train.py', 'new\x1b[2J.py'] })).toEqual([]);
  });
});

describe('outputs from a hostile or broken master', () => {
  it.each(['../evil', '/etc/passwd', 'a/../../b', 'a\\b', '', 'a//b', './a'])('refuses %j', (p) => {
    expect(() => outputTarget('/tmp/root', p)).toThrow(/refusing to write output/);
  });

  it('accepts a nested relative path', () => {
    expect(outputTarget('/tmp/root', 'a/b.json')).toBe('/tmp/root/a/b.json');
  });

  const listing = (path: string, bytes: Buffer, claimed: Buffer = bytes) => ({
    outputs: [{ path, size: claimed.length, sha256: createHash('sha256').update(claimed).digest('hex') }],
    outputs_pruned_at: null,
    file: {
      next_offset: bytes.length,
      size: bytes.length,
      encoding: 'base64',
      content: bytes.toString('base64'),
    },
  });

  it('writes nothing when the bytes are not the ones listed (DIGEST_MISMATCH)', async () => {
    const dir = makeTempDir('tampered');
    const c = clientAnswering(() => listing('m.json', Buffer.from('evil'), Buffer.from('good')));
    await expect(downloadOutputs(c, 'task_1', dir)).rejects.toMatchObject({ code: 'DIGEST_MISMATCH' });
    expect(existsSync(join(dir, 'gpu-broker-outputs', 'task_1', 'm.json'))).toBe(false);
  });

  it('writes nothing outside the task folder for a listed ../ path or a hostile task id', async () => {
    const dir = makeTempDir('escape');
    const c = clientAnswering(() => listing('../../escaped', Buffer.from('x')));
    await expect(downloadOutputs(c, 'task_1', dir)).rejects.toThrow(/refusing/);
    await expect(downloadOutputs(c, '../x', dir)).rejects.toMatchObject({ code: 'INVALID_INPUT' });
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe('LogReader', () => {
  it('prints each byte once across pages and repeated pumps', async () => {
    const log = Array.from({ length: 50 }, (_, i) => `line ${i}\n`).join('');
    let visible = 100; // the log grows between pumps
    const c = clientAnswering((path) => {
      const u = new URL(path, 'https://x');
      const offset = Number(u.searchParams.get('offset'));
      const end = Math.min(visible, offset + 37); // small pages that split lines
      return { next_offset: end, total_bytes: visible, data: log.slice(offset, end) };
    });
    let out = '';
    const r = new LogReader(c, 'task_1', { stdout: (t) => (out += t), stderr: () => undefined }, ['stdout']);
    expect(await r.pump()).toBe(100);
    expect(await r.pump()).toBe(0);
    visible = log.length;
    await r.drain();
    expect(out).toBe(log);
  });
});
