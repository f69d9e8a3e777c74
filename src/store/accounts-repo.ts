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

/** The account tree. Its rules (names, cycles, depth, what holds an account) are src/domain/accounts/tree.ts. */
export class AccountsRepo {
  private readonly allStmt;
  private readonly getStmt;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly deleteStmt;

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

  delete(name: string): void {
    this.deleteStmt.run(name);
  }
}
