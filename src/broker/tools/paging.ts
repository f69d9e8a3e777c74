/** Default page size of every listing tool. */
export const DEFAULT_PAGE_SIZE = 50;

/**
 * Most bytes of items (as JSON) one page of a listing whose items have no small fixed bound carries
 * (one reviewer's page of 50 grants was 44 MiB). A page ends before the item that
 * would take it past this, and always holds at least one item; `next_cursor` continues after the last.
 */
export const MAX_PAGE_BYTES = 1024 * 1024;

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

/**
 * {@link fetchPage}, each row shown by `view`, and the page cut at `maxBytes` of shown items: what a
 * listing of large items (grants with their scopes) answers. `cursorOf` gives the cursor after a row
 * (its id unless the listing's order is not by id).
 */
export function fetchViewPage<R, V>(
  limit: number | undefined,
  fetch: (n: number) => R[],
  view: (row: R) => V,
  cursorOf: (row: R) => string,
  maxBytes = MAX_PAGE_BYTES,
): { page: V[]; next_cursor: string | null } {
  const size = limit ?? DEFAULT_PAGE_SIZE;
  const rows = fetch(size + 1);
  const page: V[] = [];
  let bytes = 0;
  for (const [i, row] of rows.entries()) {
    if (i === size) return { page, next_cursor: cursorOf(rows[i - 1]!) };
    const shown = view(row);
    bytes += Buffer.byteLength(JSON.stringify(shown));
    if (page.length > 0 && bytes > maxBytes) return { page, next_cursor: cursorOf(rows[i - 1]!) };
    page.push(shown);
  }
  return { page, next_cursor: null };
}
