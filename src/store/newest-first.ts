import type { Db } from './db.js';

/** A page request over a table keyed by time-ordered ids (ulids): equality filters and an id cursor. */
export interface NewestFirstQuery {
  owner_id?: string | undefined;
  state?: string | undefined;
  before_id?: string | undefined;
  limit: number;
}

/**
 * Rows of `table` newest first (ids are ulids, so id order is creation order), filtered by owner and
 * state, strictly before the cursor id. `table` is one of our own table names, never input.
 */
export function selectNewestFirst<Row>(db: Db, table: 'proposals' | 'tasks', q: NewestFirstQuery): Row[] {
  const where: string[] = [];
  const args: string[] = [];
  for (const [column, value] of [
    ['owner_id = ?', q.owner_id],
    ['state = ?', q.state],
    ['id < ?', q.before_id],
  ] as const) {
    if (value === undefined) continue;
    where.push(column);
    args.push(value);
  }
  const sql = `SELECT * FROM ${table} ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY id DESC LIMIT ?`;
  return db.prepare<unknown[], Row>(sql).all(...args, q.limit);
}
