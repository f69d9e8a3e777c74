import type { z } from 'zod';
import { canonicalJsonWith } from '../../contracts/canonical-json.js';
import { BrokerError } from '../../contracts/errors.js';
import { jsonDepthExceeds, MAX_JSON_DEPTH } from '../../contracts/json-depth.js';
import { MAX_SPEC_BYTES } from '../../contracts/task-spec.js';
import type { ToolDef } from '../../contracts/tool-def.js';
import { type CanonicalForm, canonicalForm, sha256Hex } from '../../platform/digest.js';
import type { Principal } from '../../store/principals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { hasAnyRole } from '../principals.js';
import { costSharesOf, runHeavy, type ToolCost } from './tool-cost.js';

/**
 * The one path every tool call takes, from MCP or REST: role check → input parse → (mutating: one
 * transaction holding the idempotency check, the use case and the stored response) → output.
 */

/**
 * Mutating tools still served while the master refuses growth for lack of disk space: they stop work
 * that writes (cancel a task printing to its log, a proposal) or take cards out of use. Every other
 * mutating tool answers UNAVAILABLE (retryable) then; read-only tools always work.
 */
const GROWTH_EXEMPT: ReadonlySet<string> = new Set([
  'cancel_task',
  'cancel_proposal',
  'drain_worker',
  'cordon_card',
  'reconcile_task',
  'revoke_grant',
]);

/** What a handler gets besides its input. */
export interface ToolContext {
  deps: BrokerDeps;
  principal: Principal;
  /** Aborted when the client goes away (wait tools stop early). */
  signal?: AbortSignal | undefined;
  /**
   * A mutating call's `spec` in canonical form with its digest, serialised once for the idempotency
   * digest and handed on: the use case sizes and digests the spec with it instead of serialising again.
   */
  spec?: CanonicalForm | undefined;
}

/**
 * A tool with its handler and its cost (tool-cost.ts). Mutating handlers are synchronous so they run
 * inside the transaction.
 */
export type BoundTool =
  | {
      def: ToolDef;
      mutating: true;
      cost: ToolCost;
      handler: (ctx: ToolContext, input: never) => unknown;
      prepare?: Prepare;
    }
  | {
      def: ToolDef;
      mutating: false;
      cost: ToolCost;
      handler: (ctx: ToolContext, input: never) => unknown | Promise<unknown>;
      prepare?: Prepare;
    };

/**
 * Work a heavy call may do before its handler, as synchronous steps that each take a part of their own
 * (the TurnGate), e.g. inspecting a spec's new input blobs one by one: what it leaves in the master's
 * memos makes the handler's own block short. Runs after the input is parsed; changes no state a client
 * can see.
 */
export type Prepare = (ctx: ToolContext, input: never) => Array<() => void>;

/** Binds a handler to a tool definition with its exact input and output types, and says what it costs. */
export function bindTool<I extends z.ZodType, O extends z.ZodType>(
  def: ToolDef<I, O>,
  handler: (ctx: ToolContext, input: z.output<I>) => z.input<O> | Promise<z.input<O>>,
  cost: ToolCost,
  prepare?: (ctx: ToolContext, input: z.output<I>) => Array<() => void>,
): BoundTool {
  return { def, mutating: def.mutating, cost, handler, ...(prepare ? { prepare } : {}) } as BoundTool;
}

/** Formats zod issues as one teaching line: `spec.cards.count: Too big: expected number to be <=64`. */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 10)
    .map((i) => `${i.path.length ? i.path.join('.') : '(input)'}: ${i.message}`)
    .join('; ');
}

/** Raises FORBIDDEN unless the principal may call the tool. */
export function authorize(tool: BoundTool, principal: Principal): void {
  if (!hasAnyRole(principal, tool.def.roles))
    throw new BrokerError(
      'FORBIDDEN',
      `${tool.def.name} needs one of the roles: ${tool.def.roles.join(', ')}`,
      'Ask an operator for a token with that role; tools/list shows what your token may call.',
    );
}

/**
 * Parses a handler's result through the tool's output schema: extra keys are stripped (the SDK client
 * rejects any key its outputSchema does not declare) and a wrong shape is a bug, reported as INTERNAL.
 */
function shapeOutput(tool: BoundTool, value: unknown): unknown {
  const out = tool.def.output.safeParse(value);
  if (!out.success)
    throw new Error(`${tool.def.name} produced an invalid result: ${describeIssues(out.error)}`);
  return out.data;
}

/** A heavy call's parts run on in one turn of the TurnGate while that turn has taken less than this. */
const QUICK_TURN_MS = 2;

/** A read-only call whose handler took longer than this yields once before its output is checked. */
const YIELD_AFTER_MS = 4;

/** Runs one tool call. Throws BrokerError on every expected failure. */
export async function invokeTool(tool: BoundTool, ctx: ToolContext, rawInput: unknown): Promise<unknown> {
  authorize(tool, ctx.principal);
  const principalId = ctx.principal.id;
  // A heavy call takes its turn before its input is even parsed: parsing a large spec is part of its
  // cost (a flood of explain_grant calls on a 1,500-input spec spent most of its time there).
  if (tool.cost === 'heavy')
    return runHeavy(
      ctx.deps,
      principalId,
      (meter) => parseAndRun(tool, ctx, rawInput, meter).then((r) => r.value),
      ctx.signal,
    );
  if (tool.cost === 'wait') {
    const release = costSharesOf(ctx.deps).waits.take(principalId, tool.def.name);
    try {
      return (await parseAndRun(tool, ctx, rawInput)).value;
    } finally {
      release();
    }
  }
  return (await parseAndRun(tool, ctx, rawInput)).value;
}

/** Parses the input (INVALID_INPUT with the named fields) and runs the call. */
function parseInput(tool: BoundTool, rawInput: unknown): Record<string, unknown> {
  if (jsonDepthExceeds(rawInput))
    throw new BrokerError(
      'INVALID_INPUT',
      `input to ${tool.def.name} is nested more than ${MAX_JSON_DEPTH} levels deep`,
      'Send a flat spec: no real input nests that deep.',
    );
  const spec = (rawInput as { spec?: unknown } | null)?.spec;
  if (spec !== undefined && Buffer.byteLength(JSON.stringify(spec) ?? '') > MAX_SPEC_BYTES)
    throw new BrokerError(
      'PAYLOAD_TOO_LARGE',
      `spec is larger than ${MAX_SPEC_BYTES} bytes`,
      'Keep specs small: put data in files the task reads, not in argv, env or notes.',
    );
  const parsed = tool.def.input.safeParse(rawInput ?? {});
  if (!parsed.success) {
    throw new BrokerError(
      'INVALID_INPUT',
      `invalid input to ${tool.def.name}: ${describeIssues(parsed.error)}`,
      'Fix the named fields; tools/list has the JSON schema of every input.',
      { issues: parsed.error.issues.slice(0, 20) },
    );
  }
  return parsed.data as Record<string, unknown>;
}

/** Event-loop time a call has held so far, added to by each of its synchronous parts. */
export interface BusyMeter {
  ms: number;
}

/**
 * Parses and runs the call, adding each synchronous part it runs (the parse, the handler until it first
 * returns, the output check) to `meter`: what a heavy call's budget is charged. A heavy call runs each
 * part on a turn of the TurnGate (tool-cost.ts), so they are separate blocks of the event loop with
 * rests between them (a 1,500-input spec: ~10 ms each here).
 */
async function parseAndRun(
  tool: BoundTool,
  ctx: ToolContext,
  rawInput: unknown,
  meter: BusyMeter = { ms: 0 },
): Promise<{ value: unknown }> {
  const turns = tool.cost === 'heavy' ? costSharesOf(ctx.deps).turns : null;
  const measured = <T>(part: () => T): T => {
    const started = performance.now();
    try {
      return part();
    } finally {
      meter.ms += performance.now() - started;
    }
  };
  if (turns) {
    // A heavy call's parts take turns of the TurnGate (one part per turn, each principal at most half
    // the loop), but parts that are quick run on in the turn they are in: a call whose parts all take
    // a few ms (a get_status) is one turn, not four, so it waits on another principal's part once.
    const principal = ctx.principal.id;
    let turnStarted = Number.NEGATIVE_INFINITY;
    const part = <T>(fn: () => T): T | Promise<T> => {
      const now = performance.now();
      if (now - turnStarted < QUICK_TURN_MS) {
        // On in this turn; whatever it took counts toward the principal's rest, and a slow one ends the
        // turn, so the part after it takes the gate again.
        try {
          return measured(fn);
        } finally {
          const ended = performance.now();
          turns.rest(principal, now, ended);
          if (ended - turnStarted >= QUICK_TURN_MS) turnStarted = Number.NEGATIVE_INFINITY;
        }
      }
      return turns.run(principal, () => {
        turnStarted = performance.now();
        return measured(fn);
      });
    };
    const input = await part(() => parseInput(tool, rawInput));
    const steps = tool.prepare ? await part(() => tool.prepare!(ctx, input as never)) : [];
    for (const step of steps) await part(step);
    const run = () => (tool.mutating ? runMutating(tool, ctx, input) : tool.handler(ctx, input as never));
    const value = await part(run);
    if (tool.mutating) return { value };
    return { value: await part(() => shapeOutput(tool, value)) };
  }
  const input = measured(() => parseInput(tool, rawInput));
  if (tool.mutating) return { value: measured(() => runMutating(tool, ctx, input)) };
  const called = performance.now();
  const value = await measured(() => tool.handler(ctx, input as never));
  // A call that already spent a while (a diff's slices) lets waiting requests in before its answer is
  // checked and encoded, so its last blocks are not one (~25 ms at the end of get_revision).
  if (performance.now() - called > YIELD_AFTER_MS) await new Promise((r) => setImmediate(r));
  return { value: measured(() => shapeOutput(tool, value)) };
}

/** A mutating call: one transaction holding the idempotency check, the use case and the stored response. */
function runMutating(tool: BoundTool, ctx: ToolContext, input: Record<string, unknown>): unknown {
  const key = input['idempotency_key'] as string;
  const { idempotency_key: _omit, ...body } = input;
  // The spec (create_proposal, revise_proposal) is serialised once, here, and the request's canonical
  // form built around it; the handler gets it with its digest (it was serialised five times).
  const spec = body['spec'] === undefined ? undefined : canonicalForm(body['spec']);
  const canonical = canonicalJsonWith(body, spec === undefined ? {} : { spec: spec.canonical });
  const requestDigest = sha256Hex(canonical);
  const { store, clock } = ctx.deps;
  return store.transaction(() => {
    const seen = store.idempotency.get(ctx.principal.id, tool.def.name, key);
    if (seen) {
      if (seen.request_digest !== requestDigest)
        throw new BrokerError(
          'IDEMPOTENCY_CONFLICT',
          `idempotency_key "${key}" was used with a different request`,
          'Use a new key for a new action; reuse a key only to retry the exact same request.',
        );
      return seen.response;
    }
    // Below the free-space floor only what stops growth goes through (ADR 0016); a replay of a
    // call that already succeeded (above) still gets its answer. The call's size counts against what
    // uploads in flight reserved (docs/performance.md "Noisy neighbours"): the write is synchronous, so checking it beside the
    // reservations is reserving and releasing it in one step.
    if (!GROWTH_EXEMPT.has(tool.def.name))
      ctx.deps.storage?.assertAcceptsGrowth(tool.def.name, Buffer.byteLength(canonical));
    const result = shapeOutput(
      tool,
      tool.handler(spec === undefined ? ctx : { ...ctx, spec }, input as never),
    );
    store.idempotency.put(ctx.principal.id, tool.def.name, key, requestDigest, result, clock.now());
    return result;
  });
}
