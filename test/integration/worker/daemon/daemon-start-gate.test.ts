import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../../support/wait.js';
import { type Harness, harness, plan } from './daemon-harness.js';

/**
 * docs/operations.md "Partitions": a worker starts an accepted execution only once the master acknowledged its
 * `accepted` report (then the master recorded it, and never gives the task to another worker). Until
 * then nothing runs; a `cancel` or a refusal of that report ends it unstarted. Real ws, child
 * processes and SQLite; only the master is a fake, which here holds its acknowledgements back.
 */

let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h.dispose();
});

const phasesOf = (id: string) => h.master.phases(id).map((m) => m.phase);

/** The worker's `accepted` report for `id`, once the fake master has it. */
async function acceptedReport(id: string) {
  await waitFor(() => h.master.phases(id).some((m) => m.phase === 'accepted'), { what: 'accepted' });
  return h.master.phases(id).find((m) => m.phase === 'accepted')!;
}

/** Gives the worker time it would use to start a /bin/true (it reports started within milliseconds). */
const settle = () => new Promise((resolve) => setTimeout(resolve, 400));

describe('worker daemon: start only after the master acknowledged the acceptance', () => {
  it('waits for the ack of its accepted report, then runs', async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    h.master.autoAck = false;
    const p = plan({ argv: ['/bin/true'] });
    h.master.assign(p);
    const accepted = await acceptedReport(p.execution_id);
    await settle();
    expect(phasesOf(p.execution_id)).toEqual(['accepted']);

    h.master.sendRaw(JSON.stringify({ type: 'ack', boot_id: accepted.boot_id, seq: accepted.seq }));
    h.master.autoAck = true;
    await waitFor(() => phasesOf(p.execution_id).includes('cleaned'), { timeoutMs: 2500, what: 'cleaned' });
    expect(phasesOf(p.execution_id)).toEqual(['accepted', 'started', 'exited', 'cleaned']);
  });

  it('a cancel before the ack ends it unstarted: exited CANCELLED, cleaned, never started', async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    h.master.autoAck = false;
    const p = plan({ argv: ['/bin/true'] });
    h.master.assign(p);
    await acceptedReport(p.execution_id);
    h.master.sendSequenced({
      type: 'cancel',
      execution_id: p.execution_id,
      lease_epoch: p.lease_epoch,
      reason: 'withdrawn by the master',
    });
    await waitFor(() => phasesOf(p.execution_id).includes('cleaned'), { timeoutMs: 2500, what: 'cleaned' });
    expect(phasesOf(p.execution_id)).toEqual(['accepted', 'exited', 'cleaned']);
    expect(h.master.phases(p.execution_id).find((m) => m.phase === 'exited')).toMatchObject({
      failure_reason: 'CANCELLED',
    });
  });

  it('a refusal of its accepted report ends it unstarted too', async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    h.master.autoAck = false;
    const p = plan({ argv: ['/bin/true'] });
    h.master.assign(p);
    const accepted = await acceptedReport(p.execution_id);
    // What the real master answers a report about a withdrawn execution: error, then ack.
    h.master.sendRaw(
      JSON.stringify({
        type: 'error',
        code: 'STALE_EPOCH',
        message: `execution ${p.execution_id} was rejected or withdrawn`,
        ref_seq: accepted.seq,
      }),
    );
    h.master.sendRaw(JSON.stringify({ type: 'ack', boot_id: accepted.boot_id, seq: accepted.seq }));
    await waitFor(() => phasesOf(p.execution_id).includes('cleaned'), { timeoutMs: 2500, what: 'cleaned' });
    expect(phasesOf(p.execution_id)).toEqual(['accepted', 'exited', 'cleaned']);
  });
});
