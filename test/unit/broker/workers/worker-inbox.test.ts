import { describe, expect, it } from 'vitest';
import { TOUCH_WRITE_INTERVAL_MS, WorkerInbox } from '../../../../src/broker/workers/inbox.js';
import { PROTOCOL_VERSION, type WorkerMessage } from '../../../../src/contracts/worker-protocol.js';
import { enrolledCluster, samples, WORKER } from '../../../support/enrolled-cluster.js';

/** The meaning of a worker's messages after hello (src/broker/workers/inbox.ts), without a socket. */

describe('the worker inbox', () => {
  it('writes last_seen at most every TOUCH_WRITE_INTERVAL_MS, and tells the fleet every time', async () => {
    const { f, clock } = await enrolledCluster([]);
    const inbox = new WorkerInbox(f.deps, f.deps.cluster.fleet);
    const lastSeen = () => f.deps.store.workers.get(WORKER)?.last_seen_at;
    const start = clock.now();
    clock.advance(1);
    inbox.touched(WORKER, clock.now());
    expect(lastSeen()).toBe(start + 1);
    clock.advance(TOUCH_WRITE_INTERVAL_MS);
    inbox.touched(WORKER, clock.now());
    expect(lastSeen()).toBe(start + 1);
    expect(f.deps.cluster.fleet.get(WORKER).last_message_at).toBe(clock.now());
    clock.advance(1);
    inbox.touched(WORKER, clock.now());
    expect(lastSeen()).toBe(clock.now());
    f.close();
  });

  it('applies a sequenced message once: a repeat is acknowledged again without a second effect', async () => {
    const { f, clock } = await enrolledCluster([]);
    const inbox = new WorkerInbox(f.deps, f.deps.cluster.fleet);
    const sample: Extract<WorkerMessage, { type: 'sample' }> = {
      type: 'sample',
      protocol_version: PROTOCOL_VERSION,
      boot_id: 'boot-0',
      seq: 1,
      sampled_at: clock.now(),
      cards: samples,
      sampler_error: null,
      held_cards: [],
    };
    const first = inbox.receive(WORKER, sample, clock.now());
    expect(first.replies).toEqual([{ type: 'ack', boot_id: 'boot-0', seq: 1 }]);
    expect(f.deps.store.workers.mark(WORKER, 'boot-0')).toBe(1);
    const again = inbox.receive(WORKER, sample, clock.now());
    expect(again).toEqual({ replies: [{ type: 'ack', boot_id: 'boot-0', seq: 1 }], requestPass: false });
    f.close();
  });

  it('acknowledges nothing for ack and error messages, and asks for no pass', async () => {
    const { f, clock } = await enrolledCluster([]);
    const inbox = new WorkerInbox(f.deps, f.deps.cluster.fleet);
    expect(
      inbox.receive(WORKER, { type: 'ack', boot_id: f.deps.cluster.link.bootId, seq: 1 }, clock.now()),
    ).toEqual({
      replies: [],
      requestPass: false,
    });
    expect(inbox.receive(WORKER, { type: 'error', code: 'INTERNAL', message: 'x' }, clock.now())).toEqual({
      replies: [],
      requestPass: false,
    });
    f.close();
  });
});
