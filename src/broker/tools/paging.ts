/** Default page size of every listing tool. */
export const DEFAULT_PAGE_SIZE = 50;

/**
 * Cursor paging over id-ordered rows: fetches one row more than the page to learn whether another page
 * exists; the cursor is the last returned id.
 */
export function fetchPage<R extends { id: string }>(
  limit: number | undefined,
  fetch: (n: number) => R[],
): { page: R[]; next_cursor: string | null } {
  const size = limit ?? DEFAULT_PAGE_SIZE;
  const rows = fetch(size + 1);
  const page = rows.slice(0, size);
  return { page, next_cursor: rows.length > size ? (page.at(-1)?.id ?? null) : null };
}
