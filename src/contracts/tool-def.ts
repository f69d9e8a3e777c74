import { z } from 'zod';

/**
 * How a tool is described once for every edge: MCP registers it, REST maps routes onto it, and the
 * dispatcher checks roles, parses input and applies idempotency from this one definition.
 */

/** Roles that may call a tool. */
/**
 * Roles that may call a tool. `agent_reviewer` (ADR 0027) is named explicitly on each tool it may
 * call, never implied by `reviewer`: a new reviewer tool (e.g. deciding grants) refuses agents by default.
 */
export type ToolRole = 'submitter' | 'reviewer' | 'operator' | 'viewer' | 'worker' | 'agent_reviewer';

/** MCP tool annotations, always all four (docs/mcp-tools.md "Annotations"). */
export interface ToolAnnotations {
  readOnlyHint: boolean;
  destructiveHint: boolean;
  idempotentHint: boolean;
  openWorldHint: boolean;
}

/** One tool. `mutating` tools take `idempotency_key` and run in one transaction with it. */
export interface ToolDef<I extends z.ZodType = z.ZodType, O extends z.ZodType = z.ZodType> {
  name: string;
  title: string;
  description: string;
  roles: readonly ToolRole[];
  mutating: boolean;
  annotations: ToolAnnotations;
  input: I;
  output: O;
}

/** Declares a tool with its exact input/output types. */
export function defineTool<I extends z.ZodType, O extends z.ZodType>(def: ToolDef<I, O>): ToolDef<I, O> {
  return def;
}

/** The idempotency key every mutating tool takes: a replay with the same body returns the first result. */
export const IdempotencyKeySchema = z
  .string()
  .min(1)
  .max(200)
  .describe(
    'Unique per intended action (e.g. a UUID). Re-sending the same key and body returns the original result.',
  );

/** Annotations of a read-only tool. */
export const READ_ONLY: ToolAnnotations = {
  readOnlyHint: true,
  destructiveHint: false,
  idempotentHint: true,
  openWorldHint: false,
};

/** Annotations of a mutating, non-destructive tool (idempotent thanks to its key). */
export const MUTATING: ToolAnnotations = {
  readOnlyHint: false,
  destructiveHint: false,
  idempotentHint: true,
  openWorldHint: false,
};

/** Annotations of a tool that ends or discards something. */
export const DESTRUCTIVE: ToolAnnotations = {
  readOnlyHint: false,
  destructiveHint: true,
  idempotentHint: true,
  openWorldHint: false,
};

/** Roles that read proposals and tasks (visibility is filtered per principal). */
export const READERS: readonly ToolRole[] = ['submitter', 'reviewer', 'operator', 'agent_reviewer'];
/** Every human or agent role. */
export const EVERYONE: readonly ToolRole[] = [
  'submitter',
  'reviewer',
  'operator',
  'viewer',
  'agent_reviewer',
];
/** Roles that read the review queue and revisions, and may submit reviews (agents within their ceiling). */
export const REVIEWERS: readonly ToolRole[] = ['reviewer', 'operator', 'agent_reviewer'];

/** `limit` and `cursor` for listings. */
export const PageInput = {
  limit: z
    .number()
    .int()
    .min(1)
    .max(200)
    .optional()
    .describe('Page size, a whole number from 1 to 200 (default 50).'),
  cursor: z.string().max(200).optional().describe('next_cursor from the previous page.'),
};

/** Longest a `wait_for_*` call blocks, in seconds. */
export const MAX_WAIT_SECONDS = 25;
/** `timeout_seconds` of the wait tools. */
export const WaitTimeoutSchema = z
  .number()
  .min(0)
  .max(MAX_WAIT_SECONDS)
  .optional()
  .describe(`How long to wait, at most ${MAX_WAIT_SECONDS} s (default 20). Call again if timed_out.`);
