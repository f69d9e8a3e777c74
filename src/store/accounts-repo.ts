import type { Db } from './db.js';

/** An account row (docs/operations.md "Accounts and usage"). */
export interface AccountRecord {
  name: string;
  parent: string | null;
  weight: number;
  description: string | null;
  created_at: number;
  /** Cards it is guaranteed when it asks; null: no quota. */
  nominal_cards: number | null;
  /** Idle cards beyond its nominal it may hold; null: any. */
  borrowing_limit: number | null;
  /** Card-hours per `budget_period`; null: no budget. */
  budget_card_hours: number | null;
  budget_period: 'day' | 'week' | 'month' | null;
  /** The highest spec priority its tasks may ask for; null: no bound beyond the spec's. */
  max_priority: number | null;
  /**
   * 1: every task of the account is preemptible while the account borrows, whatever its spec says; 0:
   * its specs decide (docs/operations.md "Borrowing and reclaim").
   */
  preemptible: 0 | 1;
}

/**
 * A quota of an account for the cards of one model (migration 024, ADR 0048): beside the account-wide
 * one, which counts cards of every model. At least its nominal share or its budget is set.
 */
export interface ModelQuotaRecord {
  account: string;
  /** Its model's lower-case words joined by single spaces ("h100"): one quota per account and key. */
  model_key: string;
  /** The model as the operator gave it ("H100"); it covers cards whose model has these words. */
  model: string;
  nominal_cards: number | null;
  borrowing_limit: number | null;
  budget_card_hours: number | null;
  budget_period: 'day' | 'week' | 'month' | null;
}

/** The account tree. Its rules (names, cycles, depth, what holds an account) are src/domain/accounts/tree.ts. */
export class AccountsRepo {
  private readonly allStmt;
  private readonly getStmt;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly deleteStmt;
  private readonly modelQuotasStmt;
  private readonly upsertModelQuotaStmt;
  private readonly deleteModelQuotaStmt;

  constructor(db: Db) {
    this.allStmt = db.prepare<[], AccountRecord>('SELECT * FROM accounts ORDER BY name');
    this.getStmt = db.prepare<[string], AccountRecord>('SELECT * FROM accounts WHERE name = ?');
    this.insertStmt = db.prepare(
      `INSERT INTO accounts (name, parent, weight, description, created_at, nominal_cards, borrowing_limit, budget_card_hours, budget_period, max_priority, preemptible)
       VALUES (@name, @parent, @weight, @description, @created_at, @nominal_cards, @borrowing_limit, @budget_card_hours, @budget_period, @max_priority, @preemptible)`,
    );
    this.updateStmt = db.prepare(
      `UPDATE accounts SET parent = @parent, weight = @weight, description = @description, nominal_cards = @nominal_cards,
         borrowing_limit = @borrowing_limit, budget_card_hours = @budget_card_hours, budget_period = @budget_period,
         max_priority = @max_priority, preemptible = @preemptible
       WHERE name = @name`,
    );
    this.deleteStmt = db.prepare('DELETE FROM accounts WHERE name = ?');
    this.modelQuotasStmt = db.prepare<[], ModelQuotaRecord>(
      'SELECT * FROM account_model_quotas ORDER BY account, model_key',
    );
    this.upsertModelQuotaStmt = db.prepare(
      `INSERT INTO account_model_quotas (account, model_key, model, nominal_cards, borrowing_limit, budget_card_hours, budget_period)
       VALUES (@account, @model_key, @model, @nominal_cards, @borrowing_limit, @budget_card_hours, @budget_period)
       ON CONFLICT (account, model_key) DO UPDATE SET model = excluded.model, nominal_cards = excluded.nominal_cards,
         borrowing_limit = excluded.borrowing_limit, budget_card_hours = excluded.budget_card_hours,
         budget_period = excluded.budget_period`,
    );
    this.deleteModelQuotaStmt = db.prepare(
      'DELETE FROM account_model_quotas WHERE account = ? AND model_key = ?',
    );
  }

  /** Every account, by name. */
  list(): AccountRecord[] {
    return this.allStmt.all();
  }

  get(name: string): AccountRecord | undefined {
    return this.getStmt.get(name);
  }

  insert(a: AccountRecord): void {
    this.insertStmt.run(a);
  }

  /** Writes `a`'s parent, weight, description and quotas. */
  update(a: AccountRecord): void {
    this.updateStmt.run(a);
  }

  /** Deletes an account (its model quotas go with it: ON DELETE CASCADE). */
  delete(name: string): void {
    this.deleteStmt.run(name);
  }

  /** Every account's quotas per card model, by account then model key. */
  modelQuotas(): ModelQuotaRecord[] {
    return this.modelQuotasStmt.all();
  }

  /** Writes one quota per account and model key (a second write of the same key replaces it). */
  putModelQuota(q: ModelQuotaRecord): void {
    this.upsertModelQuotaStmt.run(q);
  }

  /** Removes `account`'s quota for `modelKey` (nothing when it has none). */
  deleteModelQuota(account: string, modelKey: string): void {
    this.deleteModelQuotaStmt.run(account, modelKey);
  }
}
