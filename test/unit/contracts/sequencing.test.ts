import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  MemoryMarks,
  parseMessage,
  receiveSequenced,
  repliesToInvalid,
  type SequenceRef,
  sequenced,
} from '../../../src/contracts/sequencing.js';
import {
  MasterMessageSchema,
  PROTOCOL_VERSION,
  WorkerMessageSchema,
} from '../../../src/contracts/worker-protocol.js';

/**
 * The sequenced-message rules shared by the hub, the worker and the test fakes
 * (src/contracts/sequencing.ts): what is applied, what is only acknowledged, and that nothing a peer
 * sends makes the parser throw.
 */

/** A receiver in memory: applies through `receiveSequenced`, records what it applied. */
function receiver() {
  const marks = new MemoryMarks();
  const applied: SequenceRef[] = [];
  return {
    marks,
    applied,
    deliver(ref: SequenceRef, refuse = false) {
      return receiveSequenced(ref, {
        transaction: (fn) => fn(),
        marks,
        apply: () => {
          applied.push(ref);
          return refuse ? { code: 'STALE_EPOCH', message: 'refused' } : null;
        },
      });
    },
  };
}

describe('receiveSequenced', () => {
  it('applies each message of an in-order sequence exactly once, whatever is resent around it', () => {
    // A sender numbers 1..n per boot; the wire may replay any prefix (a reconnect resends everything
    // unacknowledged) but never reorders within one boot.
    const deliveries = fc
      .array(
        fc.record({
          boot: fc.constantFrom('b1', 'b2'),
          sent: fc.integer({ min: 1, max: 20 }),
          replayFrom: fc.integer({ min: 1, max: 20 }),
        }),
        { maxLength: 30 },
      )
      .map((steps) => {
        const next = new Map<string, number>();
        const wire: SequenceRef[] = [];
        for (const s of steps) {
          const top = next.get(s.boot) ?? 0;
          const upTo = top + (s.sent % 4);
          for (let seq = Math.min(s.replayFrom, top + 1); seq <= upTo; seq++)
            if (seq >= 1) wire.push({ boot_id: s.boot, seq });
          next.set(s.boot, upTo);
        }
        return { wire, sent: next };
      });
    fc.assert(
      fc.property(deliveries, ({ wire, sent }) => {
        const r = receiver();
        for (const ref of wire) {
          const out = r.deliver(ref);
          // Every delivery is acknowledged, applied or not, and the ack is the last reply.
          expect(out.replies.at(-1)).toEqual({ type: 'ack', boot_id: ref.boot_id, seq: ref.seq });
        }
        for (const [boot, top] of sent) {
          const seqs = r.applied.filter((a) => a.boot_id === boot).map((a) => a.seq);
          expect(seqs).toEqual(Array.from({ length: top }, (_, i) => i + 1));
          expect(r.marks.mark(boot)).toBe(top);
        }
      }),
    );
  });

  it('answers a refusal with error {ref_seq} then ack, and a resend of it is only acknowledged', () => {
    const r = receiver();
    const first = r.deliver({ boot_id: 'b', seq: 4 }, true);
    expect(first).toEqual({
      kind: 'applied',
      refusal: { code: 'STALE_EPOCH', message: 'refused' },
      replies: [
        { type: 'error', code: 'STALE_EPOCH', message: 'refused', ref_seq: 4 },
        { type: 'ack', boot_id: 'b', seq: 4 },
      ],
    });
    expect(r.deliver({ boot_id: 'b', seq: 4 }, true)).toEqual({
      kind: 'duplicate',
      replies: [{ type: 'ack', boot_id: 'b', seq: 4 }],
    });
    expect(r.applied).toHaveLength(1);
  });

  it('lets an unexpected failure escape with nothing acknowledged and the mark where it was', () => {
    // A mark table with a transaction that rolls back when its body throws, like SQLite's.
    const table = new Map<string, number>();
    const marks = {
      raiseAbove(bootId: string, seq: number) {
        if (seq <= (table.get(bootId) ?? 0)) return false;
        table.set(bootId, seq);
        return true;
      },
    };
    const transaction = <T>(fn: () => T): T => {
      const saved = new Map(table);
      try {
        return fn();
      } catch (err) {
        table.clear();
        for (const [k, v] of saved) table.set(k, v);
        throw err;
      }
    };
    const fail = () =>
      receiveSequenced(
        { boot_id: 'b', seq: 1 },
        {
          transaction,
          marks,
          apply: () => {
            throw new Error('disk full');
          },
        },
      );
    expect(fail).toThrow('disk full');
    expect(table.get('b')).toBeUndefined();
    // The resend after the reconnect is applied, not dropped as a duplicate.
    const again = receiveSequenced({ boot_id: 'b', seq: 1 }, { transaction, marks, apply: () => null });
    expect(again.kind).toBe('applied');
  });
});

describe('parseMessage and poison messages', () => {
  it('never throws, whatever text arrives, and answers everything invalid with INVALID_MESSAGE', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.json(), fc.constant(null)), (text) => {
        for (const schema of [WorkerMessageSchema, MasterMessageSchema]) {
          const parsed = parseMessage(schema, text);
          if (!parsed.ok) expect(parsed.invalid.code).toBe('INVALID_MESSAGE');
        }
      }),
    );
  });

  it('acknowledges a poison message only when it names a sequenced type, a valid boot id and seq', () => {
    const cases: Array<[Record<string, unknown>, boolean]> = [
      [{ type: 'assign', boot_id: 'm1', seq: 41, plan: { execution_id: 'half-a-plan' } }, true],
      [{ type: 'no-such-type', boot_id: 'm1', seq: 2 }, true],
      [{ type: 'no-such-type', seq: 1 }, false],
      [{ type: 'assign', boot_id: 'm1', seq: 0 }, false],
      [{ type: 'assign', boot_id: 'm1', seq: -3 }, false],
      [{ type: 'assign', boot_id: 'm1', seq: 2 ** 53 }, false],
      [{ type: 'assign', boot_id: 'm1', seq: 1.5 }, false],
      [{ type: 'assign', boot_id: 'm1', seq: '7' }, false],
      [{ type: 'assign', boot_id: '', seq: 7 }, false],
      [{ type: 'assign', boot_id: 'x'.repeat(129), seq: 7 }, false],
      [{ type: 'ack', boot_id: 'm1', seq: 'x' }, false],
      [{ type: 'welcome', boot_id: 'm1', seq: 9 }, false],
    ];
    for (const [body, poison] of cases) {
      const parsed = parseMessage(MasterMessageSchema, JSON.stringify(body));
      expect(parsed.ok).toBe(false);
      if (parsed.ok) continue;
      const recorded: SequenceRef[] = [];
      const replies = repliesToInvalid(parsed.invalid, {
        acceptsPoison: true,
        recordPoison: (ref) => recorded.push(ref),
      });
      expect(replies[0]).toMatchObject({ type: 'error', code: 'INVALID_MESSAGE' });
      expect(replies.some((r) => r.type === 'ack')).toBe(poison);
      expect(recorded.length).toBe(poison ? 1 : 0);
    }
  });

  it('does not place a poison message in a sequence the receiver does not know yet (before hello)', () => {
    const parsed = parseMessage(
      WorkerMessageSchema,
      JSON.stringify({ type: 'sample', boot_id: 'w', seq: 3 }),
    );
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    const replies = repliesToInvalid(parsed.invalid, {
      acceptsPoison: false,
      recordPoison: () => {
        throw new Error('must not be called');
      },
    });
    expect(replies).toEqual([expect.objectContaining({ type: 'error', ref_seq: 3 })]);
  });

  it('refuses a message nested deeper than the limit without parsing it with zod', () => {
    const deep = `{"type":"assign","boot_id":"m","seq":5,"plan":${'['.repeat(10_000)}${']'.repeat(10_000)}}`;
    const parsed = parseMessage(MasterMessageSchema, deep);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) {
      expect(parsed.invalid.message).toMatch(/nested more than 64 levels/);
      expect(parsed.invalid.poison).toEqual({ boot_id: 'm', seq: 5 });
    }
  });

  it('round-trips what `sequenced` stamps through the schema of its direction', () => {
    const query = sequenced({ type: 'query' as const, execution_id: 'ex_1' }, 'm1', 3);
    expect(query).toEqual({
      type: 'query',
      execution_id: 'ex_1',
      protocol_version: PROTOCOL_VERSION,
      boot_id: 'm1',
      seq: 3,
    });
    expect(parseMessage(MasterMessageSchema, JSON.stringify(query))).toEqual({ ok: true, message: query });
  });
});
