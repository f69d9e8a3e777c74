import { afterEach, describe, expect, it } from 'vitest';
import { WorkerSessions, type WorkerSocket } from '../../../../src/broker/workers/live-sessions.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';

/**
 * A batch's replies leave in one write of the connection (src/broker/workers/live-sessions.ts
 * `replyAll`, ADR 0034): the socket is corked around the frames, uncorked after, in order.
 */

let f: BrokerFixture | undefined;
afterEach(() => f?.close());

function recordingSocket(events: string[], open = true): WorkerSocket {
  return {
    readyState: open ? 1 : 3,
    OPEN: 1,
    isPaused: false,
    send: (text) => events.push(`send ${text}`),
    close: () => events.push('close'),
    terminate: () => events.push('terminate'),
    pause: () => events.push('pause'),
    resume: () => events.push('resume'),
    cork: () => events.push('cork'),
    uncork: () => events.push('uncork'),
  };
}

describe('WorkerSessions.replyAll', () => {
  it('corks the connection around the frames of a batch, in order', () => {
    f = makeBrokerDeps();
    const sessions = new WorkerSessions(f.deps, f.deps.cluster.fleet, () => {});
    const events: string[] = [];
    const s = sessions.open(recordingSocket(events), 'w1', 'p1');
    sessions.replyAll(s, [
      { type: 'ack', boot_id: 'b', seq: 1 },
      { type: 'ack', boot_id: 'b', seq: 2 },
    ]);
    expect(events).toEqual([
      'cork',
      'send {"type":"ack","boot_id":"b","seq":1}',
      'send {"type":"ack","boot_id":"b","seq":2}',
      'uncork',
    ]);
  });

  it('touches nothing for no replies, and sends nothing on a closed socket', () => {
    f = makeBrokerDeps();
    const sessions = new WorkerSessions(f.deps, f.deps.cluster.fleet, () => {});
    const events: string[] = [];
    sessions.replyAll(sessions.open(recordingSocket(events), 'w1', 'p1'), []);
    expect(events).toEqual([]);
    const closed: string[] = [];
    sessions.replyAll(sessions.open(recordingSocket(closed, false), 'w2', 'p2'), [
      { type: 'ack', boot_id: 'b', seq: 1 },
    ]);
    expect(closed).toEqual(['cork', 'uncork']);
  });
});
