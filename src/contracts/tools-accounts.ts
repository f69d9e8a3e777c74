import { z } from 'zod';
import { DESTRUCTIVE, defineTool, EVERYONE, IdempotencyKeySchema, MUTATING, READ_ONLY } from './tool-def.js';
import { TimeSchema } from './views.js';

/**
 * Accounts and usage (docs/operations.md "Accounts and usage", docs/mcp-tools.md): operators manage the
 * account tree; everyone reads usage (their own account's, or every account's for operators and viewers).
 */

const AccountNameSchema = z.string().min(1).max(64).describe('An account name, e.g. team-a');
const WeightSchema = z
  .number()
  .int()
  .min(1)
  .max(1_000_000)
  .describe('Fair-share weight relative to its siblings (1: an equal share; 2: twice that). Default 1.');
const DescriptionSchema = z.string().max(500).describe('What the account is for; at most 500 characters.');

/** An account's quotas as sent: a field absent keeps it, null clears it. */
const QuotaInput = {
  model: z
    .string()
    .min(1)
    .max(64)
    .optional()
    .describe(
      'A card model, named as a task’s cards.model is (e.g. H100; a model no worker has yet is allowed): the quota fields of this call are then that model’s quota (cards whose model has these words), not the account-wide one. Both apply. A model quota left with neither nominal_cards nor a budget is removed.',
    ),
  nominal_cards: z
    .number()
    .int()
    .min(0)
    .max(100_000)
    .nullable()
    .optional()
    .describe('Cards the account is guaranteed when it asks; null: no quota. Children sum within it.'),
  borrowing_limit: z
    .number()
    .int()
    .min(0)
    .max(100_000)
    .nullable()
    .optional()
    .describe('Idle cards beyond its nominal share it may hold; null: any. Needs nominal_cards.'),
  budget_card_hours: z
    .number()
    .positive()
    .max(100_000_000)
    .nullable()
    .optional()
    .describe('Card-hours it may use per budget_period; null: no budget.'),
  budget_period: z
    .enum(['day', 'week', 'month'])
    .nullable()
    .optional()
    .describe('The budget resets each UTC day, week (from Monday) or month.'),
};

const MaxPrioritySchema = z
  .number()
  .int()
  .min(0)
  .max(100)
  .nullable()
  .optional()
  .describe('The highest spec priority its tasks may ask for (0..100); null: no bound beyond the spec’s.');

const PreemptibleSchema = z
  .boolean()
  .optional()
  .describe(
    'true: every task of the account may be preempted while the account holds more than its nominal share, whatever its spec says (default false: the spec’s `preemptible` decides).',
  );

/** An account as listed. */
export const AccountViewSchema = z.object({
  name: z.string(),
  parent: z.string().nullable(),
  weight: z.number().int(),
  /** Its normalised share of the pool: the product of weight / siblings' weights down from root. */
  share: z.number(),
  description: z.string().nullable(),
  /** Principals (not revoked) in it. */
  principals: z.number().int(),
  created_at: TimeSchema,
  /** The highest spec priority its tasks may ask for; null: the spec's own bound. */
  max_priority: z.number().int().nullable(),
  /** Every task of it is preemptible while it borrows. */
  preemptible: z.boolean(),
  quotas: z.object({
    nominal_cards: z.number().int().nullable(),
    borrowing_limit: z.number().int().nullable(),
    budget_card_hours: z.number().nullable(),
    budget_period: z.enum(['day', 'week', 'month']).nullable(),
  }),
  /** Its quotas per card model (ADR 0048), beside the account-wide `quotas`; both apply. */
  model_quotas: z.array(
    z.object({
      model: z.string(),
      nominal_cards: z.number().int().nullable(),
      borrowing_limit: z.number().int().nullable(),
      budget_card_hours: z.number().nullable(),
      budget_period: z.enum(['day', 'week', 'month']).nullable(),
    }),
  ),
});

/** list_accounts */
export const listAccountsTool = defineTool({
  name: 'list_accounts',
  title: 'List accounts',
  description:
    'Every account (team) in the tree under root, with its parent, fair-share weight, normalised share and how many principals it holds.',
  roles: ['operator', 'viewer'],
  mutating: false,
  annotations: READ_ONLY,
  input: z.strictObject({}),
  output: z.object({ accounts: z.array(AccountViewSchema) }),
});

/** create_account */
export const createAccountTool = defineTool({
  name: 'create_account',
  title: 'Create an account',
  description:
    'Creates an account (a team) under a parent (default root), with quotas account-wide or, with `model`, for one card model. Refused (typed) for a bad or taken name, an unknown parent, a tree deeper than 8 levels or a weight outside 1..1000000.',
  roles: ['operator'],
  mutating: true,
  annotations: MUTATING,
  input: z.strictObject({
    name: AccountNameSchema,
    parent: AccountNameSchema.optional().describe('Its parent account (default root).'),
    weight: WeightSchema.optional(),
    description: DescriptionSchema.optional(),
    ...QuotaInput,
    max_priority: MaxPrioritySchema,
    preemptible: PreemptibleSchema,
    idempotency_key: IdempotencyKeySchema,
  }),
  output: z.object({ account: AccountViewSchema }),
});

/** set_account */
export const setAccountTool = defineTool({
  name: 'set_account',
  title: 'Change an account',
  description:
    'Changes an account’s weight, parent, description or quotas (nominal_cards, borrowing_limit, budget_card_hours per budget_period; null clears one), account-wide or, with `model`, for the cards of one model. Refused (typed) when the new parent is the account itself or below it (a cycle), unknown, or would put accounts deeper than 8 levels; for negative or absurd quotas, a borrowing limit without a nominal share, a bad model name, or children’s nominal shares above their parent’s (account-wide or for the same model).',
  roles: ['operator'],
  mutating: true,
  annotations: MUTATING,
  input: z.strictObject({
    name: AccountNameSchema,
    parent: AccountNameSchema.optional(),
    weight: WeightSchema.optional(),
    description: DescriptionSchema.nullable()
      .optional()
      .describe('What the account is for (null clears it).'),
    ...QuotaInput,
    max_priority: MaxPrioritySchema,
    preemptible: PreemptibleSchema,
    idempotency_key: IdempotencyKeySchema,
  }),
  output: z.object({ account: AccountViewSchema }),
});

/** delete_account */
export const deleteAccountTool = defineTool({
  name: 'delete_account',
  title: 'Delete an account',
  description:
    'Deletes an empty account. Refused (INVALID_STATE) while it has child accounts, principals or tasks not yet ended; root and default cannot be deleted. Its usage history stays in the ledger.',
  roles: ['operator'],
  mutating: true,
  annotations: DESTRUCTIVE,
  input: z.strictObject({ name: AccountNameSchema, idempotency_key: IdempotencyKeySchema }),
  output: z.object({ deleted: z.string() }),
});

/** get_usage */
export const getUsageTool = defineTool({
  name: 'get_usage',
  title: 'Show GPU usage',
  description:
    'Card-seconds (and card-hours) charged to leases that ended in [since, until), summed by account, principal or card model, simulated cards apart. Operators and viewers see every account; everyone else sees their own account.',
  roles: EVERYONE,
  mutating: false,
  annotations: READ_ONLY,
  input: z.strictObject({
    by: z.enum(['account', 'principal', 'model']).optional().describe('How to sum (default account).'),
    since: z
      .string()
      .max(40)
      .optional()
      .describe('ISO 8601 start, inclusive (default: 7 days before until).'),
    until: z.string().max(40).optional().describe('ISO 8601 end, exclusive (default: now).'),
    interval: z
      .enum(['hour', 'day'])
      .optional()
      .describe('Also sum per hour or per day (at most 400 of them in the window): `series`.'),
  }),
  output: z.object({
    by: z.enum(['account', 'principal', 'model']),
    since: TimeSchema,
    until: TimeSchema,
    /** The account the lines are limited to, or null: every account. */
    account: z.string().nullable(),
    lines: z.array(
      z.object({
        key: z.string(),
        simulated: z.boolean(),
        card_seconds: z.number().int(),
        card_hours: z.number(),
        leases: z.number().int(),
      }),
    ),
    total_card_seconds: z.number().int(),
    /** With `interval`: one entry per hour or day from `since`, each with its lines (none: no usage). */
    series: z
      .array(
        z.object({
          start: TimeSchema,
          lines: z.array(
            z.object({ key: z.string(), simulated: z.boolean(), card_seconds: z.number().int() }),
          ),
        }),
      )
      .optional(),
  }),
});
