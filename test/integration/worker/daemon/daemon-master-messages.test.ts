import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PROTOCOL_VERSION } from '../../../../src/contracts/worker-protocol.js';
import { waitFor } from '../../../support/wait.js';
import { type Harness, harness, plan } from './daemon-harness.js';

/**
 * What the master sends, as a hostile or broken master would send it: every frame is parsed against
 * `MasterMessageSchema` through the shared rules (src/contracts/sequencing.ts) and answered with a typed
 * `INVALID_MESSAGE`; nothing stops the worker, pollutes its objects, or runs. Real ws, real child
 * processes, real SQLite; only the master is a fake.
 */

let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h.dispose();
});

const errors = () => h.master.replies('error');
const acked = (seq: number) =>
  h.master.replies('ack').some((a) => a.boot_id === h.master.bootId && a.seq === seq);

describe('worker daemon: messages from the master', () => {
  it('answers every malformed frame with a typed error and keeps working', async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    const hostile = [
      '',
      'null',
      '[]',
      '123',
      '"assign"',
      '{"__proto__":{"polluted":true},"type":"assign"}',
      JSON.stringify({ type: 'welcome', worker_id: 7 }),
      JSON.stringify({ type: 'cancel', protocol_version: PROTOCOL_VERSION, boot_id: 'm', seq: 2 ** 53 }),
      `{"type":"assign","plan":${'['.repeat(100_000)}${']'.repeat(100_000)}}`,
      JSON.stringify({ type: 'assign', protocol_version: 1, boot_id: h.master.bootId, seq: 3, plan: {} }),
    ];
    for (const text of hostile) h.master.sendRaw(text);
    await waitFor(() => errors().length === hostile.length, { timeoutMs: 2500, what: 'one error per frame' });
    expect(errors().every((e) => e.code === 'INVALID_MESSAGE')).toBe(true);
    expect(({} as Record<string, unknown>)['polluted']).toBeUndefined();
    // Only the last one names a place in the master's sequence (seq 2^53 is not a safe integer).
    expect(errors().map((e) => e.ref_seq ?? null)).toEqual([...hostile.slice(0, -1).map(() => null), 3]);
    expect(h.master.replies('ack').map((a) => a.seq)).toEqual([3]);

    // Above the poison message's seq, as the real master's next message would be.
    const p = plan({ argv: ['/bin/true'] });
    h.master.assign(p, 4);
    await waitFor(() => h.master.phases(p.execution_id).some((m) => m.phase === 'cleaned'), {
      timeoutMs: 2500,
      what: 'cleaned',
    });
    expect(h.master.processed('hello')).toHaveLength(1);
  });

  it('records a poison message as processed: a message resent under its seq is only acknowledged', async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    h.master.sendSequenced({ type: 'assign', plan: { execution_id: 'half-a-plan' } }, 50);
    await waitFor(() => acked(50), { timeoutMs: 2500, what: 'ack of the poison message' });
    expect(errors()).toEqual([expect.objectContaining({ code: 'INVALID_MESSAGE', ref_seq: 50 })]);

    // Same seq, now a valid plan: a duplicate, acknowledged again and never run.
    const dup = plan({ argv: ['/bin/true'] });
    h.master.assign(dup, 50);
    await waitFor(() => h.master.replies('ack').filter((a) => a.seq === 50).length === 2, {
      timeoutMs: 2500,
      what: 'second ack',
    });

    // The next seq runs.
    const next = plan({ argv: ['/bin/true'] });
    expect(h.master.assign(next)).toBe(51);
    await waitFor(() => h.master.phases(next.execution_id).some((m) => m.phase === 'cleaned'), {
      timeoutMs: 2500,
      what: 'cleaned',
    });
    expect(h.master.phases(dup.execution_id)).toEqual([]);
  });
});
