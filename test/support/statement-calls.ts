import { vi } from 'vitest';

/**
 * How many times `fn` calls `method` of the prepared statement `field` holds on `owner` (a repo's private
 * statement, reached by name): for tests that pin how often the store reads something.
 */
export function statementCalls(
  owner: object,
  field: string,
  method: 'get' | 'all' | 'run',
  fn: () => void,
): number {
  const stmt = (owner as Record<string, Record<string, (...args: unknown[]) => unknown>>)[field];
  if (stmt === undefined) throw new Error(`no statement ${field}`);
  const spy = vi.spyOn(stmt, method);
  try {
    fn();
    return spy.mock.calls.length;
  } finally {
    spy.mockRestore();
  }
}
