import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../src/broker/tools/proposals.js';
import { escapeField, escapeText, jsonText } from '../../../src/cli/common/output.js';
import { run as status } from '../../../src/cli/operator/status.js';
import { run as review } from '../../../src/cli/review/review.js';
import { PROTOCOL_VERSION } from '../../../src/contracts/worker-protocol.js';
import { runCli, spawnCli } from '../../support/cli.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { connectRawWorker, type RawWorker } from '../../support/raw-worker.js';
import { validSpec } from '../../support/spec.js';

/**
 * docs/security.md "Terminal escapes": text a submitter (or a worker) controls reaches a reviewer's or operator's terminal
 * only with its control characters made visible. The attack is the row's: a title that erases the line
 * and prints a green "APPROVED" with a bell.
 */

const ATTACK = '\u001b[2K\u001b[1G\u001b[32mAPPROVED by security\u0007';
const ATTACK_SHOWN = '\\x1b[2K\\x1b[1G\\x1b[32mAPPROVED by security\\x07';
/** Every character a terminal may act on: C0 but line feed and tab, DEL, C1, bidi marks, overrides, isolates. */
const ACTIVE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

let m: TestMaster;
let aliceToken: string;
let remote: string[];
let worker: RawWorker;

beforeAll(async () => {
  m = await startTestMaster();
  aliceToken = m.createToken('alice', ['submitter']);
  const rita = m.createToken('rita', ['reviewer']);
  remote = ['--url', m.url, '--token', rita, '--ca-file', m.caCertPath!];
});

afterAll(async () => {
  await worker?.close();
  await m?.close();
});

async function proposal(spec: Parameters<typeof validSpec>[0]): Promise<RevisionResult> {
  const api = m.rest(aliceToken);
  const r = (await api.post<RevisionResult>('/api/v1/proposals', { spec: validSpec(spec) })).body;
  await api.post(`/api/v1/proposals/${r.proposal_id}/confirm`, { revision_id: r.revision_id });
  return r;
}

describe('review list and review show', () => {
  it("escape the row's title, and every other text the submitter or a reviewer wrote", async () => {
    const r = await proposal({
      title: ATTACK,
      objective: 'first line\nsecond \u001b]0;owned\u0007 line\r\u202eevil',
      notes: 'note \u009b31m C1 CSI and \u2066isolate\u2069 and DEL\u007f',
    });
    const list = await runCli(review, ['list', ...remote]);
    expect(list.code).toBe(0);
    expect(list.stdout).toContain(ATTACK_SHOWN);
    expect(list.stdout).not.toMatch(ACTIVE);

    const show = await runCli(review, ['show', r.proposal_id, ...remote]);
    expect(show.code).toBe(0);
    expect(show.stdout).not.toMatch(ACTIVE);
    expect(show.stdout).toContain(`  title:     ${ATTACK_SHOWN}\n`);
    expect(show.stdout).toContain('    first line\n    second \\x1b]0;owned\\x07 line\\r\\u202eevil\n');
    expect(show.stdout).toContain('note \\u009b31m C1 CSI and \\u2066isolate\\u2069 and DEL\\u007f');

    // A reviewer's comment, shown on the next look, is escaped too; a newline cannot fake a line.
    const rc = await runCli(review, [
      'request-changes',
      r.proposal_id,
      '--revision',
      r.revision_id,
      '--comment',
      'fine\n    mallory: APPROVE — \u001b[32mok',
      ...remote,
    ]);
    expect(rc.code).toBe(0);
    const again = await runCli(review, ['show', r.proposal_id, ...remote]);
    expect(again.stdout).toContain('    rita: REQUEST_CHANGES — fine\\n    mallory: APPROVE — \\x1b[32mok\n');
    expect(again.stdout).not.toMatch(ACTIVE);
  });

  it('--json stays the same JSON document, with no raw control characters in it', async () => {
    const r = await proposal({ title: `${ATTACK} \u009b\u202e` });
    const j = await runCli(review, ['show', r.proposal_id, ...remote, '--json']);
    expect(j.code).toBe(0);
    expect(j.stdout).not.toMatch(ACTIVE);
    expect(j.json<{ revision: { spec: { title: string } } }>().revision.spec.title).toBe(
      `${ATTACK} \u009b\u202e`,
    );
  });
});

describe('status', () => {
  it("escapes what a worker reports: its host name and its cards' model", async () => {
    worker = await connectRawWorker({
      url: m.url,
      caPem: m.caPem,
      token: m.createToken('w-escapes', ['worker'], 'w-escapes'),
      workerId: 'w-escapes',
    });
    const from = worker.received.length;
    worker.send({
      type: 'hello',
      protocol_version: PROTOCOL_VERSION,
      worker_id: 'w-escapes',
      boot_id: 'boot-escapes',
      version: 'raw-test',
      hostname: `host${ATTACK}`,
      provider: 'sim',
      cards: [{ ...worker.simCards[0]!, model: 'H100\u001b[8m hidden \u202e' }],
      executions: [],
      master_marks: [],
    });
    await worker.next((msg) => msg['type'] === 'welcome', { from, what: 'welcome' });
    const out = await runCli(status, [
      '--url',
      m.url,
      '--token',
      m.operatorToken,
      '--ca-file',
      m.caCertPath!,
    ]);
    expect(out.code).toBe(0);
    expect(out.stdout).not.toMatch(ACTIVE);
    expect(out.stdout).toContain(`host${ATTACK_SHOWN}`);
    expect(out.stdout).toContain('H100\\x1b[8m hidden \\u202e');
  });

  it('escapes what a Slurm worker reports: its partition (the status column of ADR 0013)', async () => {
    const slurmWorker = await connectRawWorker({
      url: m.url,
      caPem: m.caPem,
      token: m.createToken('w-escapes-slurm', ['worker'], 'w-escapes-slurm'),
      workerId: 'w-escapes-slurm',
    });
    try {
      const from = slurmWorker.received.length;
      slurmWorker.send({
        type: 'hello',
        protocol_version: PROTOCOL_VERSION,
        worker_id: 'w-escapes-slurm',
        boot_id: 'boot-escapes-slurm',
        version: 'raw-test',
        hostname: 'submit-host',
        provider: 'sim',
        cards: [],
        executions: [],
        master_marks: [],
        backend: 'slurm',
        slurm: { partition: `gpu${ATTACK}`, nodes: [{ name: 'n1', gpus: 0, state: 'IDLE' }] },
      });
      await slurmWorker.next((msg) => msg['type'] === 'welcome', { from, what: 'welcome' });
      const out = await runCli(status, [
        '--url',
        m.url,
        '--token',
        m.operatorToken,
        '--ca-file',
        m.caCertPath!,
      ]);
      expect(out.code).toBe(0);
      expect(out.stdout).not.toMatch(ACTIVE);
      expect(out.stdout).toContain(`slurm:gpu${ATTACK_SHOWN} (1 node)`);
    } finally {
      await slurmWorker.close();
    }
  });
});

describe('the escaping functions', () => {
  it('render every control visibly, keep line feeds and tabs only in multi-line text, and leave JSON meaning unchanged', () => {
    expect(escapeField(ATTACK)).toBe(ATTACK_SHOWN);
    expect(escapeField('a\nb\tc\rd\u0000\u007f\u0085\u009f\u202a\u202e\u2066\u2069\u200f\u061c')).toBe(
      'a\\nb\\tc\\rd\\x00\\u007f\\u0085\\u009f\\u202a\\u202e\\u2066\\u2069\\u200f\\u061c',
    );
    expect(escapeText('line 1\n\tline 2\r\u001b[A')).toBe('line 1\n\tline 2\\r\\x1b[A');
    expect(escapeField('plain text, ünïcødé, 中文, emoji 🚀, back\\slash')).toBe(
      'plain text, ünïcødé, 中文, emoji 🚀, back\\slash',
    );
    const value = { s: `${ATTACK}\u0085\u202e\u2067\u007f\n\t`, nested: [{ k: '\u009b2J' }] };
    expect(jsonText(value)).not.toMatch(ACTIVE);
    expect(JSON.parse(jsonText(value))).toEqual(value);
    // The stream guard over JSON.stringify's output (mcp-stdio frames, direct writes) changes no value.
    const guarded = escapeText(JSON.stringify(value, null, 2));
    expect(guarded).not.toMatch(ACTIVE);
    expect(JSON.parse(guarded)).toEqual(value);
  });
});

describe('the built program', () => {
  it('guards everything it prints, even an unknown command name', async () => {
    const bad = await spawnCli([`frob${ATTACK}`]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(`unknown command "frob${ATTACK_SHOWN}"`);
    expect(bad.stderr).not.toMatch(ACTIVE);
  });
});
