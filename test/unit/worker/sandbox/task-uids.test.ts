import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_TASK_UIDS, TaskUidPool, UID_BLOCK } from '../../../../worker/sandbox/task-uids.js';

// Task uids are never handed out twice (docs/security.md "Code the reviewer did not read"): per-uid kernel state (keyrings) and files a task
// left in a writable mount must never reach a later task, whoever owns it.

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'gpu-broker-uids-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('TaskUidPool', () => {
  it('never gives a released uid to another execution', () => {
    const pool = new TaskUidPool({ first: 5000, last: 5009 });
    const a = pool.acquire('exec-a');
    pool.release('exec-a');
    const b = pool.acquire('exec-b');
    expect(b).not.toBe(a);
    expect(pool.acquire('exec-b')).toBe(b);
  });

  it('remembers the next unused uid across a restart (the state file in the data dir)', () => {
    const state = join(dir, 'task-uids.next');
    const first = new TaskUidPool({ first: 5000, last: 5009 }, state);
    const used = [first.acquire('a'), first.acquire('b')];
    first.release('a');
    first.release('b');
    const restarted = new TaskUidPool({ first: 5000, last: 5009 }, state);
    const next = restarted.acquire('c');
    expect(used).not.toContain(next);
    expect(next).toBeGreaterThan(Math.max(...used));
    expect(readFileSync(state, 'utf8').trim()).toBe(String(next + 1));
  });

  it('reserves a wide range in blocks: one state write per block, a restart begins after the block', () => {
    const state = join(dir, 'task-uids.next');
    const range = { first: 100_000, last: 999_999 };
    const pool = new TaskUidPool(range, state);
    expect(pool.acquire('a')).toBe(100_000);
    expect(readFileSync(state, 'utf8').trim()).toBe(String(100_000 + UID_BLOCK));
    // Writing a marker shows whether the pool writes the file again inside the block: it must not.
    writeFileSync(state, `${100_000 + UID_BLOCK}\n# untouched`);
    for (let i = 1; i < UID_BLOCK; i++) expect(pool.acquire(`in-block-${i}`)).toBe(100_000 + i);
    expect(readFileSync(state, 'utf8')).toContain('# untouched');
    // The next uid is past the block: a new reservation, written before the uid is handed out.
    expect(pool.acquire('next-block')).toBe(100_000 + UID_BLOCK);
    expect(readFileSync(state, 'utf8').trim()).toBe(String(100_000 + 2 * UID_BLOCK));
    // A restart (a crash mid-block included) never hands out a uid of the reserved block.
    const restarted = new TaskUidPool(range, state);
    expect(restarted.acquire('after-restart')).toBe(100_000 + 2 * UID_BLOCK);
  });

  it('a narrow range reserves one uid at a time, so a restart wastes none', () => {
    const state = join(dir, 'task-uids.next');
    const pool = new TaskUidPool({ first: 5000, last: 5999 }, state);
    expect(pool.acquire('a')).toBe(5000);
    expect(readFileSync(state, 'utf8').trim()).toBe('5001');
    expect(new TaskUidPool({ first: 5000, last: 5999 }, state).acquire('b')).toBe(5001);
  });

  it('says so when the range is used up, instead of reusing', () => {
    const pool = new TaskUidPool({ first: 5000, last: 5001 });
    pool.acquire('a');
    pool.release('a');
    pool.acquire('b');
    pool.release('b');
    expect(() => pool.acquire('c')).toThrow(/used once.*never reused.*--task-uids range above 5001/);
  });

  it('refuses a damaged state file rather than start over at uids already used', () => {
    const state = join(dir, 'task-uids.next');
    writeFileSync(state, 'garbage');
    expect(() => new TaskUidPool({ first: 5000, last: 5009 }, state)).toThrow(/does not hold a uid/);
  });

  it('a claimed uid (a Slurm job from before a restart) moves the next uid past it', () => {
    const state = join(dir, 'task-uids.next');
    const pool = new TaskUidPool({ first: 5000, last: 5009 }, state);
    expect(pool.claim('old', 5004)).toBe(true);
    expect(pool.acquire('new')).toBe(5005);
  });

  it('the default range is wide enough not to run out', () => {
    expect(DEFAULT_TASK_UIDS.last - DEFAULT_TASK_UIDS.first).toBeGreaterThan(1_000_000_000);
  });
});

describe('task uids on one host (docs/security.md "The task sandbox")', () => {
  const registry = () => join(dir, 'host', 'task-uids.next');

  it('two workers with the same range and their own data dirs never hand out one uid', () => {
    const range = { first: 2_000_000_000, last: 3_999_999_999 };
    const a = new TaskUidPool(range, join(dir, 'a.next'), registry());
    const b = new TaskUidPool(range, join(dir, 'b.next'), registry());
    const seen = new Set<number>();
    for (let i = 0; i < 3 * UID_BLOCK; i++)
      for (const [name, pool] of [
        ['a', a],
        ['b', b],
      ] as const) {
        const uid = pool.acquire(`${name}-${i}`);
        expect(seen.has(uid), `uid ${uid} twice`).toBe(false);
        seen.add(uid);
      }
  });

  it('a worker restarted on a fresh data dir never starts its range over from the first uid', () => {
    const range = { first: 5000, last: 99_999 };
    const first = new TaskUidPool(range, join(dir, 'old.next'), registry());
    const used = first.acquire('x');
    expect(used).toBe(5000);
    const again = new TaskUidPool(range, join(dir, 'new-data-dir.next'), registry());
    expect(again.acquire('y')).toBeGreaterThan(used);
  });

  it('overlapping ranges of several workers stay disjoint, whatever the order of their starts', () => {
    const ranges = [
      { first: 10_000, last: 200_000 },
      { first: 50_000, last: 300_000 },
      { first: 10_000, last: 400_000 },
    ];
    const pools = ranges.map((r, i) => new TaskUidPool(r, join(dir, `${i}.next`), registry()));
    const seen = new Set<number>();
    let x = 7;
    for (let i = 0; i < 600; i++) {
      x = (x * 1103515245 + 12345) % 2147483648;
      const k = x % pools.length;
      const uid = pools[k]!.acquire(`p${k}-${i}`);
      expect(uid).toBeGreaterThanOrEqual(ranges[k]!.first);
      expect(uid).toBeLessThanOrEqual(ranges[k]!.last);
      expect(seen.has(uid), `uid ${uid} twice`).toBe(false);
      seen.add(uid);
    }
  });

  it('a range wholly below what the host handed out is used up, and says how far the host went', () => {
    const high = new TaskUidPool({ first: 9000, last: 99_999 }, undefined, registry());
    high.acquire('h');
    const low = new TaskUidPool({ first: 5000, last: 8999 }, undefined, registry());
    expect(() => low.acquire('l')).toThrow(/handed out uids up to \d+.*range above/);
  });

  it('attack: a counter dir others can write is refused (they could set the counter back)', () => {
    const open = join(dir, 'open');
    mkdirSync(open, { mode: 0o777 });
    chmodSync(open, 0o777);
    const pool = new TaskUidPool({ first: 5000, last: 99_999 }, undefined, join(open, 'task-uids.next'));
    expect(() => pool.acquire('a')).toThrow(/writable by nobody else/);
  });

  it('a lock left by a worker that is gone is taken over; one a live worker holds is waited for', () => {
    mkdirSync(join(dir, 'host'));
    const pool = new TaskUidPool({ first: 5000, last: 99_999 }, undefined, registry());
    writeFileSync(`${registry()}.lock`, '2147483646\n'); // no such pid
    expect(pool.acquire('a')).toBe(5000);
    expect(() => readFileSync(`${registry()}.lock`)).toThrow(/ENOENT/);
    // Held by this very process (alive): the reservation waits, then gives up naming the lock.
    writeFileSync(`${registry()}.lock`, `${process.pid}\n`);
    const other = new TaskUidPool({ first: 5000, last: 99_999 }, undefined, registry());
    expect(() => other.acquire('b')).toThrow(/held by another worker/);
    rmSync(`${registry()}.lock`);
    expect(other.acquire('b')).toBeGreaterThan(5000);
  });
});
