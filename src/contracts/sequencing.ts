import type { z } from 'zod';
import { jsonDepthExceeds, MAX_JSON_DEPTH } from './json-depth.js';
import { PROTOCOL_VERSION, type WorkerErrorCode } from './worker-protocol.js';

/**
 * The rules for sequenced messages (docs/worker-protocol.md "Sequencing"), written once and
 * used by both receivers — the master's hub (src/broker/workers/ingest.ts and inbox.ts, behind the
 * gateway src/ws/hub.ts), the worker daemon (worker/daemon/start-worker.ts) —
 * and by the test fakes that stand in for either (test/support/fake-master.ts,
 * test/support/raw-worker.ts). Pure: the edges pass in their mark store and their transaction.
 *
 *   1. parse   — text → JSON (depth-checked) → zod; anything else is an `InvalidMessage`, never a throw;
 *   2. poison  — an invalid message that names a boot id and a seq is acknowledged (and its seq
 *                recorded as processed), so the sender does not resend it for ever;
 *   3. dedupe  — a sequenced message is applied only if its seq is above the receiver's mark for that
 *                sender boot; the mark and the effect commit together; a duplicate is only acknowledged;
 *   4. refuse  — an effect refused with a typed error is still processed: `error {ref_seq}`, then `ack`;
 *   5. fail    — an unexpected exception escapes `receiveSequenced` with nothing committed and nothing
 *                acknowledged: the edge drops the session and ignores what is still buffered on it, so
 *                no later message raises the mark past the failed one; the sender resends in order.
 *                An edge may name the failure in its reply (the hub answers a store out of space with
 *                `error UNAVAILABLE {ref_seq}` and closes 4003), but it never acknowledges it.
 */

/** Message types that carry no seq in either direction (everything else is sequenced). */
export const UNSEQUENCED_TYPES: ReadonlySet<string> = new Set(['hello', 'welcome', 'ack', 'error']);

/** Longest boot id the protocol accepts (the schemas' `Id`). */
const MAX_BOOT_ID = 128;

/** Where a sequenced message sits in its sender's sequence. */
export interface SequenceRef {
  boot_id: string;
  seq: number;
}

/** `ack {boot_id, seq}`: the same shape in both directions. */
export interface AckReply extends SequenceRef {
  type: 'ack';
}

/** `error {code, message, ref_seq?}`: the same shape in both directions. */
export interface ErrorReply {
  type: 'error';
  code: WorkerErrorCode;
  message: string;
  ref_seq?: number;
}

/** A reply a receiver sends back for one incoming message. */
export type Reply = AckReply | ErrorReply;

/** A typed refusal: what the receiver could not (or would not) do with one message. */
export interface Refusal {
  code: WorkerErrorCode;
  message: string;
}

/** A message that does not parse: the typed error the receiver answers with, never a crash. */
export interface InvalidMessage {
  readonly code: 'INVALID_MESSAGE';
  /** Says what is wrong, for the log and the `error` reply. */
  readonly message: string;
  /** The `type` it named, when it named one. */
  readonly type: string | null;
  /** Set when it names a sequenced type, a boot id and a seq: acknowledge it (rule 2). */
  readonly poison: SequenceRef | null;
}

/** The result of parsing one incoming frame. */
export type Parsed<M> = { ok: true; message: M } | { ok: false; invalid: InvalidMessage };

/** Stamps a body with the protocol version and its place in the sender's sequence. */
export function sequenced<B extends { type: string }>(
  body: B,
  bootId: string,
  seq: number,
): B & { protocol_version: typeof PROTOCOL_VERSION } & SequenceRef {
  return { ...body, protocol_version: PROTOCOL_VERSION, boot_id: bootId, seq };
}

/** The acknowledgement of one sequenced message. */
export function ackOf(ref: SequenceRef): AckReply {
  return { type: 'ack', boot_id: ref.boot_id, seq: ref.seq };
}

/**
 * Rule 1: parses one frame (`null` for a binary frame) against `schema`. Every failure — binary, not
 * JSON, nested too deep, not a valid message — is an `InvalidMessage` naming the cause.
 */
export function parseMessage<S extends z.ZodType>(schema: S, text: string | null): Parsed<z.infer<S>> {
  if (text === null)
    return { ok: false, invalid: invalid(null, 'binary frames are not part of the protocol') };
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return {
      ok: false,
      invalid: invalid(null, `not JSON (${(err as Error).message}): ${text.slice(0, 80)}`),
    };
  }
  if (jsonDepthExceeds(raw))
    return { ok: false, invalid: invalid(raw, `nested more than ${MAX_JSON_DEPTH} levels deep`) };
  const parsed = schema.safeParse(raw);
  if (parsed.success) return { ok: true, message: parsed.data };
  const issues = parsed.error.issues
    .slice(0, 3)
    .map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`)
    .join('; ');
  return { ok: false, invalid: invalid(raw, issues) };
}

function invalid(raw: unknown, why: string): InvalidMessage {
  const fields = (typeof raw === 'object' && raw !== null && !Array.isArray(raw) ? raw : {}) as Record<
    string,
    unknown
  >;
  const type = typeof fields['type'] === 'string' ? fields['type'].slice(0, 64) : null;
  return {
    code: 'INVALID_MESSAGE',
    message: `invalid ${type ?? 'untyped'} message: ${why}`.slice(0, 4096),
    type,
    poison: poisonRef(type, fields['boot_id'], fields['seq']),
  };
}

/** Rule 2: the place in a sequence an invalid message names, when it names a valid one. */
function poisonRef(type: string | null, bootId: unknown, seq: unknown): SequenceRef | null {
  if (type !== null && UNSEQUENCED_TYPES.has(type)) return null;
  if (typeof bootId !== 'string' || bootId.length === 0 || bootId.length > MAX_BOOT_ID) return null;
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 1) return null;
  return { boot_id: bootId, seq };
}

/**
 * The replies to an invalid message: `error` (with `ref_seq` when it names one), and for a poison
 * message `ack`. `recordPoison` is called first for a poison message, so that the receiver can raise its
 * mark (a resend is then a duplicate); a receiver that cannot place the message in a sequence yet (the
 * hub before `hello`) passes `acceptsPoison: false` and only answers the error.
 */
export function repliesToInvalid(
  bad: InvalidMessage,
  opts: { acceptsPoison: boolean; recordPoison: (ref: SequenceRef) => void },
): Reply[] {
  const poison = opts.acceptsPoison ? bad.poison : null;
  const error: ErrorReply = {
    type: 'error',
    code: bad.code,
    message: bad.message,
    ...(bad.poison === null ? {} : { ref_seq: bad.poison.seq }),
  };
  if (poison === null) return [error];
  opts.recordPoison(poison);
  return [error, ackOf(poison)];
}

/** The processed marks of one receiver: the highest seq applied per sender boot id. */
export interface SequenceMarks {
  /** Raises the mark of `bootId` to `seq` if `seq` is above it; false when it is not (a duplicate). */
  raiseAbove(bootId: string, seq: number): boolean;
}

/** What `receiveSequenced` did with one message. */
export type Received<R extends Refusal> =
  | { kind: 'duplicate'; replies: Reply[] }
  | { kind: 'applied'; refusal: R | null; replies: Reply[] };

/**
 * Rules 3–5: applies one sequenced message at most once. Inside `transaction`, the mark is raised
 * (compare-and-set) and only then `apply` runs; `apply` returns a refusal (rule 4) or null. Replies:
 * `error {ref_seq}` for a refusal, then `ack`; a duplicate gets only the `ack`. An exception from
 * `apply` or the store propagates with nothing acknowledged (rule 5).
 */
export function receiveSequenced<R extends Refusal>(
  ref: SequenceRef,
  edge: {
    transaction<T>(fn: () => T): T;
    marks: SequenceMarks;
    apply(): R | null;
  },
): Received<R> {
  const outcome = edge.transaction((): { duplicate: true } | { duplicate: false; refusal: R | null } => {
    if (!edge.marks.raiseAbove(ref.boot_id, ref.seq)) return { duplicate: true };
    return { duplicate: false, refusal: edge.apply() };
  });
  const ack = ackOf(ref);
  if (outcome.duplicate) return { kind: 'duplicate', replies: [ack] };
  const { refusal } = outcome;
  if (refusal === null) return { kind: 'applied', refusal, replies: [ack] };
  const error: ErrorReply = { type: 'error', code: refusal.code, message: refusal.message, ref_seq: ref.seq };
  return { kind: 'applied', refusal, replies: [error, ack] };
}

/** A mark store in memory (the test fakes; and the model the SQLite ones follow). */
export class MemoryMarks implements SequenceMarks {
  private readonly marks = new Map<string, number>();
  raiseAbove(bootId: string, seq: number): boolean {
    if (seq <= (this.marks.get(bootId) ?? 0)) return false;
    this.marks.set(bootId, seq);
    return true;
  }
  /** The mark of one sender boot (0 before any message). */
  mark(bootId: string): number {
    return this.marks.get(bootId) ?? 0;
  }
  /** Every mark, as `welcome.worker_marks` / `hello.master_marks` carry them. */
  list(): SequenceRef[] {
    return [...this.marks].map(([boot_id, seq]) => ({ boot_id, seq }));
  }
}
