import type { Db } from './db.js';

/** Roles a principal may hold (docs/security.md). */
export const ROLES = ['submitter', 'reviewer', 'operator', 'viewer', 'worker', 'agent_reviewer'] as const;
/** A role. */
export type Role = (typeof ROLES)[number];

/** A principal as the broker sees it. */
export interface Principal {
  id: string;
  name: string;
  roles: Role[];
  worker_id: string | null;
  /** The account (team) it belongs to; `default` unless placed elsewhere (docs/operations.md "Accounts and usage"). */
  account: string;
  created_at: number;
  revoked_at: number | null;
}

interface PrincipalRow {
  id: string;
  name: string;
  roles: string;
  worker_id: string | null;
  token_hash: string;
  account: string;
  created_at: number;
  revoked_at: number | null;
}

function toPrincipal(row: PrincipalRow): Principal {
  return {
    id: row.id,
    name: row.name,
    roles: JSON.parse(row.roles) as Role[],
    worker_id: row.worker_id,
    account: row.account,
    created_at: row.created_at,
    revoked_at: row.revoked_at,
  };
}

/** Principals and their token hashes. Tokens themselves are never stored. */
export class PrincipalsRepo {
  private readonly byHash;
  private readonly byName;
  private readonly byId;
  private readonly insertStmt;
  private readonly allStmt;
  private readonly revokeStmt;
  private readonly inAccountStmt;

  constructor(db: Db) {
    this.byHash = db.prepare<[string], PrincipalRow>('SELECT * FROM principals WHERE token_hash = ?');
    this.byName = db.prepare<[string], PrincipalRow>('SELECT * FROM principals WHERE name = ?');
    this.byId = db.prepare<[string], PrincipalRow>('SELECT * FROM principals WHERE id = ?');
    this.insertStmt = db.prepare(
      'INSERT INTO principals (id, name, roles, worker_id, token_hash, account, created_at) VALUES (@id, @name, @roles, @worker_id, @token_hash, @account, @created_at)',
    );
    this.allStmt = db.prepare<[], PrincipalRow>('SELECT * FROM principals ORDER BY name');
    this.revokeStmt = db.prepare(
      'UPDATE principals SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL',
    );
    this.inAccountStmt = db.prepare<[string], { n: number }>(
      'SELECT count(*) AS n FROM principals WHERE account = ? AND revoked_at IS NULL',
    );
  }

  /** Live (not revoked) principals in `account`. */
  countInAccount(account: string): number {
    return this.inAccountStmt.get(account)?.n ?? 0;
  }

  /** The principal holding this token hash, with the stored hash for a constant-time comparison. */
  findByTokenHash(hash: string): { principal: Principal; token_hash: string } | undefined {
    const row = this.byHash.get(hash);
    return row ? { principal: toPrincipal(row), token_hash: row.token_hash } : undefined;
  }

  /** The principal with this name. */
  findByName(name: string): Principal | undefined {
    const row = this.byName.get(name);
    return row ? toPrincipal(row) : undefined;
  }

  /** The principal with this id. */
  findById(id: string): Principal | undefined {
    const row = this.byId.get(id);
    return row ? toPrincipal(row) : undefined;
  }

  /** Inserts a principal (in `default` unless an account is named). */
  insert(p: Omit<Principal, 'revoked_at' | 'account'> & { token_hash: string; account?: string }): void {
    this.insertStmt.run({ ...p, account: p.account ?? 'default', roles: JSON.stringify(p.roles) });
  }

  /** All principals, by name. */
  list(): Principal[] {
    return this.allStmt.all().map(toPrincipal);
  }

  /** Revokes by name; returns false if there was no live principal of that name. */
  revoke(name: string, now: number): boolean {
    return this.revokeStmt.run(now, name).changes === 1;
  }
}
