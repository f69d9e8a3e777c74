import { describe, expect, it } from 'vitest';
import { PrincipalShare } from '../../../src/broker/principal-share.js';
import { BrokerError } from '../../../src/contracts/errors.js';

/** A call whose end the test decides. */
function gate() {
  let open!: () => void;
  let fail!: (err: Error) => void;
  const done = new Promise<void>((resolve, reject) => {
    open = resolve;
    fail = reject;
  });
  return { done, open, fail };
}

const flush = () => new Promise((r) => setImmediate(r));

describe('PrincipalShare (per-principal share of an expensive call)', () => {
  it('runs at most k calls of one principal; its next call waits, another principal does not', async () => {
    const share = new PrincipalShare('get_revision', 2, 8);
    const started: string[] = [];
    const a = [gate(), gate(), gate()];
    const calls = a.map((g, i) =>
      share.run('alice', async () => {
        started.push(`a${i}`);
        await g.done;
      }),
    );
    await flush();
    expect(started).toEqual(['a0', 'a1']);
    expect(share.stats('alice')).toEqual({ running: 2, queued: 1, peakRunning: 2 });
    // Bob is served while alice's third call still waits.
    await share.run('bob', async () => {
      started.push('b');
    });
    expect(started).toEqual(['a0', 'a1', 'b']);
    expect(share.stats('alice').queued).toBe(1);
    a[0]!.open();
    await flush();
    expect(started).toEqual(['a0', 'a1', 'b', 'a2']);
    a[1]!.open();
    a[2]!.open();
    await Promise.all(calls);
    expect(share.stats('alice')).toEqual({ running: 0, queued: 0, peakRunning: 0 });
    expect(share.peakRunning()).toBe(2);
  });

  it('serves one principal’s waiting calls first come, first served', async () => {
    const share = new PrincipalShare('get_revision', 1, 8);
    const order: number[] = [];
    const first = gate();
    const calls = [0, 1, 2, 3].map((i) =>
      share.run('alice', async () => {
        order.push(i);
        if (i === 0) await first.done;
      }),
    );
    await flush();
    expect(order).toEqual([0]);
    first.open();
    await Promise.all(calls);
    expect(order).toEqual([0, 1, 2, 3]);
  });

  it('refuses a call past the queue with UNAVAILABLE and runs nothing of it', async () => {
    const share = new PrincipalShare('get_revision', 1, 1);
    const g = gate();
    let ran = 0;
    const work = async () => {
      ran++;
      await g.done;
    };
    const running = share.run('alice', work);
    const queued = share.run('alice', work);
    const refused = share.run('alice', work);
    await expect(refused).rejects.toBeInstanceOf(BrokerError);
    await expect(refused).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    expect(ran).toBe(1);
    // Another principal is not refused for alice's queue.
    await share.run('bob', async () => undefined);
    g.open();
    await Promise.all([running, queued]);
    expect(ran).toBe(2);
  });

  it('gives the place back when a call fails, so the next waiting call runs', async () => {
    const share = new PrincipalShare('get_revision', 1, 4);
    const g = gate();
    const failing = share.run('alice', () => g.done);
    let ranNext = false;
    const next = share.run('alice', async () => {
      ranNext = true;
    });
    g.fail(new Error('boom'));
    await expect(failing).rejects.toThrow('boom');
    await next;
    expect(ranNext).toBe(true);
    expect(share.stats('alice')).toEqual({ running: 0, queued: 0, peakRunning: 0 });
  });

  it('a waiting call whose client went away leaves the queue without running; the next one takes the place', async () => {
    const share = new PrincipalShare('get_revision', 1, 8);
    const ran: string[] = [];
    const first = gate();
    const running = share.run('alice', async () => {
      ran.push('first');
      await first.done;
    });
    const client = new AbortController();
    const abandoned = share.run(
      'alice',
      async () => {
        ran.push('abandoned');
      },
      client.signal,
    );
    const later = share.run('alice', async () => {
      ran.push('later');
    });
    await flush();
    expect(share.stats('alice')).toMatchObject({ running: 1, queued: 2 });
    client.abort();
    await expect(abandoned).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    expect(share.stats('alice')).toMatchObject({ running: 1, queued: 1 });
    first.open();
    await Promise.all([running, later]);
    expect(ran).toEqual(['first', 'later']);
    expect(share.stats('alice')).toEqual({ running: 0, queued: 0, peakRunning: 0 });
    // Already gone before it asked: refused at once, nothing run.
    await expect(share.run('alice', async () => ran.push('late'), client.signal)).rejects.toBeInstanceOf(
      BrokerError,
    );
    expect(ran).toEqual(['first', 'later']);
  });

  it('an abort after the call got its place changes nothing', async () => {
    const share = new PrincipalShare('get_revision', 1, 8);
    const client = new AbortController();
    const result = await share.run(
      'alice',
      async () => {
        client.abort();
        return 42;
      },
      client.signal,
    );
    expect(result).toBe(42);
  });

  it('refuses a share below one', () => {
    expect(() => new PrincipalShare('x', 0, 1)).toThrow(RangeError);
  });
});
