import { z } from 'zod';
import { UNTRUSTED_TEXT_NOTE } from './review-trust.js';
import { CoverageViewSchema, GrantScopeSchema } from './standing-grant.js';
import { TaskSpecSchema } from './task-spec.js';
import {
  DESTRUCTIVE,
  defineTool,
  IdempotencyKeySchema,
  MUTATING,
  PageInput,
  READ_ONLY,
  READERS,
} from './tool-def.js';
import { TimeSchema } from './views.js';

/** Standing-grant tools (docs/mcp-tools.md "Grants"). */

const GrantIdSchema = z.string().min(1).max(128).describe('The grant id, e.g. grt_01J…');
const GrantStateSchema = z.enum(['REQUESTED', 'ACTIVE', 'SUSPENDED', 'REJECTED', 'REVOKED', 'EXPIRED']);

/** A grant as shown. */
export const GrantViewSchema = z.object({
  grant_id: z.string(),
  state: GrantStateSchema,
  grantee: z.string(),
  requested_by: z.string(),
  decided_by: z.string().nullable(),
  base_revision_id: z.string(),
  supersedes: z.string().nullable(),
  scope: GrantScopeSchema,
  /**
   * What arguments past argv_prefix reach, in words: "none: argv is fixed", "extra arguments go to the
   * reviewed script train.py", or "WIDENED: extra arguments reach `make`, which can run any command".
   */
  extra_args_reach: z.string(),
  /** Written by the requester: untrusted text. */
  reason: z.string(),
  decision_comment: z.string().nullable(),
  budget: z.object({
    max_runs: z.number().int(),
    runs_used: z.number().int(),
    max_card_hours: z.number(),
    card_hours_charged: z.number(),
    card_hours_reserved: z.number(),
    concurrency: z.number().int(),
    running: z.number().int(),
    breaker_k: z.number().int(),
    consecutive_failures: z.number().int(),
  }),
  expires_at: TimeSchema,
  created_at: TimeSchema,
  decided_at: TimeSchema.nullable(),
});

/** request_grant */
export const requestGrantTool = defineTool({
  name: 'request_grant',
  title: 'Request a standing grant',
  description:
    'Drafts a standing grant from one of your revisions that a person approved (its base; never one only a grant or an agent reviewer approved): later revisions inside the scope run without a new review, within max_runs, max_card_hours, concurrency and the expiry. Omitted scope fields are drafted from the base (its argv[0..1], cards, time limit, limits, image); extra_args is drafted "script" when argv[1] is an input the policy runs as a script, else "none" (make, uv run, torchrun, python -m and any launcher get a fixed argv unless you ask for "any_unsafe"). The grant is REQUESTED until a reviewer other than you decides it with decide_grant. A reviewer or operator may create one for the base revision’s owner. A grant is immutable: to change one, request a new one with `supersedes`.',
  roles: ['submitter', 'reviewer', 'operator'],
  mutating: true,
  annotations: MUTATING,
  input: z.strictObject({
    base_revision_id: z.string().min(1).max(128).describe('A revision that ran (approved by a reviewer).'),
    scope: GrantScopeSchema.partial()
      .optional()
      .describe('What may change; omitted fields come from the base.'),
    max_runs: z.number().int().min(1).max(10000).describe('Most runs it may approve in all.'),
    max_card_hours: z.number().positive().max(1_000_000).describe('Card-hours the runs may use in all.'),
    concurrency: z
      .number()
      .int()
      .min(1)
      .max(64)
      .optional()
      .describe('Runs at once (queued or running); default 1.'),
    ttl_seconds: z
      .number()
      .int()
      .min(60)
      .describe('Lifetime; capped by the operator’s grants.max_ttl_seconds.'),
    breaker_k: z
      .number()
      .int()
      .min(1)
      .max(100)
      .optional()
      .describe('Failed runs in a row that suspend it; default 3.'),
    reason: z.string().min(1).max(4000).describe('Why: shown to the reviewer as untrusted text.'),
    supersedes: z.string().min(1).max(128).optional().describe('A grant this one replaces once approved.'),
    idempotency_key: IdempotencyKeySchema,
  }),
  output: z.object({ grant: GrantViewSchema, next_action: z.string() }),
});

/** decide_grant */
export const decideGrantTool = defineTool({
  name: 'decide_grant',
  title: 'Approve or reject a standing grant',
  description:
    'Decides one exact REQUESTED grant. Never its grantee and never its requester (SELF_GRANT_FORBIDDEN). Read it first with get_grant: the scope is what later revisions may change without review.',
  roles: ['reviewer', 'operator'],
  mutating: true,
  annotations: MUTATING,
  input: z.strictObject({
    grant_id: GrantIdSchema,
    decision: z.enum(['APPROVE', 'REJECT']).describe('APPROVE makes it ACTIVE; REJECT ends it.'),
    comment: z.string().max(4000).optional().describe('Why, for the grantee and the audit log.'),
    idempotency_key: IdempotencyKeySchema,
  }),
  output: z.object({ grant: GrantViewSchema }),
});

/** revoke_grant */
export const revokeGrantTool = defineTool({
  name: 'revoke_grant',
  title: 'Revoke a standing grant',
  description:
    'Stops a grant at once: no revision is auto-approved under it any more. cancel_running: true also cancels its queued and running tasks. Reviewers and operators may revoke any grant; the grantee its own; the requester its own REQUESTED one.',
  roles: ['submitter', 'reviewer', 'operator'],
  mutating: true,
  annotations: DESTRUCTIVE,
  input: z.strictObject({
    grant_id: GrantIdSchema,
    cancel_running: z.boolean().optional().describe('Also cancel the tasks it approved that have not ended.'),
    comment: z.string().max(4000).optional().describe('Why, for the grantee and the audit log.'),
    idempotency_key: IdempotencyKeySchema,
  }),
  output: z.object({ grant: GrantViewSchema, cancelled_task_ids: z.array(z.string()) }),
});

/** explain_grant */
export const explainGrantTool = defineTool({
  name: 'explain_grant',
  title: 'Would a grant cover this?',
  description:
    'Dry run: whether a revision (revision_id) or a spec (spec) would be auto-approved by grant_id, or by any of your ACTIVE grants, and if not the first failing clause, e.g. "cards 8 > 4". Changes nothing.',
  roles: READERS,
  mutating: false,
  annotations: READ_ONLY,
  input: z.strictObject({
    grant_id: GrantIdSchema.optional(),
    revision_id: z.string().min(1).max(128).optional().describe('A revision to test (or give spec).'),
    spec: TaskSpecSchema.optional().describe('A spec to test as if it were a revision of yours.'),
  }),
  output: z.object({ results: z.array(CoverageViewSchema) }),
});

/** list_grants */
export const listGrantsTool = defineTool({
  name: 'list_grants',
  title: 'List standing grants',
  description:
    'Grants newest first: yours (as grantee or requester), or every grant for reviewers and operators.',
  roles: READERS,
  mutating: false,
  annotations: READ_ONLY,
  input: z.strictObject({
    state: GrantStateSchema.optional().describe('Only grants in this state.'),
    ...PageInput,
  }),
  output: z.object({ grants: z.array(GrantViewSchema), next_cursor: z.string().nullable() }),
});

/** get_grant */
export const getGrantTool = defineTool({
  name: 'get_grant',
  title: 'Read a standing grant',
  description: `One grant with every run it approved: its receipt (matched clauses, budget before and after), its charge, and the changes of that revision against the grant’s base revision. ${UNTRUSTED_TEXT_NOTE}`,
  roles: READERS,
  mutating: false,
  annotations: READ_ONLY,
  input: z.strictObject({ grant_id: GrantIdSchema }),
  output: z.object({
    grant: GrantViewSchema,
    runs: z.array(
      z.object({
        task_id: z.string(),
        proposal_id: z.string(),
        revision_id: z.string(),
        cards: z.number().int(),
        card_seconds_reserved: z.number().int(),
        card_seconds_charged: z.number().int().nullable(),
        outcome: z.string().nullable(),
        receipt: z.record(z.string(), z.unknown()),
        diff_against_base: z.array(z.record(z.string(), z.unknown())),
        created_at: TimeSchema,
      }),
    ),
    untrusted_fields: z.array(z.string()),
  }),
});
