import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { grantRetryDelayMs } from '../../../src/broker/loops/scheduler.js';
import { PROTOCOL_VERSION } from '../../../src/contracts/worker-protocol.js';
import { approveTask, clusterConfig, getTask, shellSpec } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { connectRawWorker, type RawWorker } from '../../support/raw-worker.js';
import { waitFor } from '../../support/wait.js';

/**
 * docs/state-machines.md: a sample naming one card index twice made every grant on that worker fail on the
 * lease_cards constraint, and the scheduler retried 12,956 times in 10 s. Now such a card list is a
 * sampler error for that worker (cards UNKNOWN, alert, no grant), and a grant that fails to apply for
 * any other reason backs off and raises `grant_failing` instead of spinning.
 */

interface Alert {
  kind: string;
  subject: string;
  message: string;
}

let m: TestMaster;
let alice: Client;
let rita: Client;
const raws: RawWorker[] = [];

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
});

afterAll(async () => {
  for (const r of raws) await r.close();
  await m?.close();
});

async function rawWorker(id: string): Promise<RawWorker> {
  const raw = await connectRawWorker({
    url: m.url,
    caPem: m.caPem,
    token: m.createToken(`worker-${id}`, ['worker'], id),
    workerId: id,
  });
  raws.push(raw);
  return raw;
}

async function alerts(): Promise<Alert[]> {
  return expectOk(await callTool<{ alerts: Alert[] }>(alice, 'get_status', {})).alerts;
}

const sample = (raw: RawWorker, seq: number, cards: readonly unknown[]) =>
  raw.sendSeq(seq, { type: 'sample', sampled_at: Date.now(), cards, sampler_error: null });

describe('a card list that names one card twice', () => {
  it('is a sampler error: cards UNKNOWN, an alert, no grant; a correct sample restores the worker', async () => {
    const raw = await rawWorker('raw-dup');
    await raw.hello(2);
    const [c0, c1] = raw.simCards;
    sample(raw, 1, [c0, { ...c1!, index: 0 }]);
    await waitFor(() => m.deps.cluster.fleet.get('raw-dup').sampler_error?.includes('index 0 twice'), {
      what: 'the duplicate index refused',
    });
    expect(await alerts()).toContainEqual(
      expect.objectContaining({
        kind: 'sampler_error',
        subject: 'raw-dup',
        message: expect.stringContaining('index 0 twice'),
      }),
    );
    const cards = expectOk(
      await callTool<{ cards: Array<{ worker_id: string; state: string }> }>(alice, 'list_cards', {}),
    ).cards.filter((c) => c.worker_id === 'raw-dup');
    expect(cards.map((c) => c.state)).toEqual(['UNKNOWN', 'UNKNOWN']);

    const from = raw.received.length;
    const id = await approveTask(alice, rita, shellSpec('true', { worker: 'raw-dup' }));
    await waitFor(async () => (await getTask(alice, id)).reason !== null, { what: 'a wait reason' });
    expect((await getTask(alice, id)).state).toBe('QUEUED');
    expect(m.store.leases.latestLeaseForTask(id)).toBeUndefined();

    sample(raw, 2, [c0, c1]);
    const assign = await raw.next((r) => r['type'] === 'assign', {
      from,
      what: 'the assign once the list is sound',
    });
    expect((assign['plan'] as { task_id: string }).task_id).toBe(id);
    expect(m.deps.cluster.fleet.get('raw-dup').sampler_error).toBeNull();
  });

  it('in hello (one uuid twice): refused from the start, nothing stored as the worker’s cards', async () => {
    const raw = await rawWorker('raw-dup-hello');
    const [c0, c1] = raw.simCards;
    raw.send({
      type: 'hello',
      protocol_version: PROTOCOL_VERSION,
      worker_id: 'raw-dup-hello',
      boot_id: raw.bootId,
      version: 'raw-test',
      hostname: 'raw-host',
      provider: 'sim',
      cards: [c0, { ...c1!, uuid: c0!.uuid }],
      executions: [],
      master_marks: [],
      isolation: 'bwrap',
    });
    await raw.next((r) => r['type'] === 'welcome', { what: 'welcome' });
    expect(m.deps.cluster.fleet.get('raw-dup-hello').sampler_error).toMatch(/uuid .* twice/);
    expect(m.store.workers.get('raw-dup-hello')?.cards).toEqual([]);
  });
});

describe('a grant that keeps failing to apply', () => {
  it('backs off with a wait reason and a grant_failing alert, then goes through once the cause is gone', async () => {
    const raw = await rawWorker('raw-grant');
    await raw.hello(2);
    // Keep the samples fresh (the cluster timing marks a silent worker offline after 2 s).
    let seq = 0;
    const keepSampling = setInterval(() => sample(raw, ++seq, raw.simCards.slice(0, 2)), 150);
    onTestFinished(() => clearInterval(keepSampling));
    await waitFor(() => m.deps.cluster.fleet.get('raw-grant').cards.length === 2, { what: 'two cards' });
    // A real constraint failure the decision cannot foresee, in the real database.
    m.store.db.exec(
      `CREATE TEMP TRIGGER refuse_raw_grant BEFORE INSERT ON lease_cards WHEN NEW.worker_id = 'raw-grant'
       BEGIN SELECT RAISE(ABORT, 'test: lease_cards refused'); END`,
    );
    const from = raw.received.length;
    const id = await approveTask(alice, rita, shellSpec('true', { worker: 'raw-grant' }));
    const reason = await waitFor(
      async () => {
        const r = (await getTask(alice, id)).reason;
        return r?.['code'] === 'grant_failed' ? r : null;
      },
      { what: 'the grant_failed wait reason' },
    );
    expect(reason['error']).toContain('lease_cards refused');
    expect(await alerts()).toContainEqual(
      expect.objectContaining({
        kind: 'grant_failing',
        subject: id,
        message: expect.stringContaining('lease_cards refused'),
      }),
    );
    // Backing off, not spinning: the next attempt comes no sooner than the retry time the last failure
    // set (each record says when its attempt was: retry_at less its delay), and it is one attempt.
    const failing = () => m.deps.cluster.failingGrants().find((f) => f.task_id === id);
    const before = await waitFor(failing, { what: 'the failing grant' });
    const after = await waitFor(
      () => {
        const f = failing();
        return f && f.failures > before.failures ? f : null;
      },
      { what: 'the next attempt at the grant' },
    );
    expect(after.failures).toBe(before.failures + 1);
    expect(after.retry_at - grantRetryDelayMs(after.failures)).toBeGreaterThanOrEqual(before.retry_at);

    m.store.db.exec('DROP TRIGGER refuse_raw_grant');
    await raw.next((r) => r['type'] === 'assign', { from, what: 'the assign after the cause is gone' });
    expect((await alerts()).map((a) => a.kind)).not.toContain('grant_failing');
  });
});
