/**
 * Slurm hostlist expressions (`node[01-03,07]`, `rack[1-2]-gpu[1-2]`, `a,b[1-2]`) expanded without
 * calling Slurm, in Slurm's order (the first bracket varies slowest). Zero padding follows the range's
 * lower bound as Slurm does (`n[08-10]` → n08 n09 n10). Bad input throws HostlistError rather than
 * guessing.
 */

/** A hostlist expression this parser does not accept. */
export class HostlistError extends Error {
  constructor(
    readonly expression: string,
    detail: string,
  ) {
    super(`bad hostlist '${expression}': ${detail}`);
    this.name = 'HostlistError';
  }
}

/** More names than this is refused (a typo such as `n[1-99999999]` must not eat memory). */
export const MAX_HOSTLIST_NAMES = 65_536;

/** Expands a hostlist expression; an empty string or `(null)` gives []. */
export function expandHostlist(expression: string): string[] {
  const expr = expression.trim();
  if (expr === '' || expr === '(null)' || expr === 'None') return [];
  const out: string[] = [];
  for (const item of splitTopLevel(expr)) {
    if (item === '') throw new HostlistError(expression, 'empty item');
    for (const name of expandItem(item, expression)) {
      out.push(name);
      if (out.length > MAX_HOSTLIST_NAMES) throw new HostlistError(expression, 'too many names');
    }
  }
  return out;
}

/** Splits on commas outside brackets. */
function splitTopLevel(expr: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of expr) {
    if (ch === '[') depth++;
    if (ch === ']') depth--;
    if (depth < 0) throw new HostlistError(expr, "unbalanced ']'");
    if (ch === ',' && depth === 0) {
      parts.push(cur);
      cur = '';
    } else cur += ch;
  }
  if (depth !== 0) throw new HostlistError(expr, "unbalanced '['");
  parts.push(cur);
  return parts;
}

function expandItem(item: string, whole: string): string[] {
  const open = item.indexOf('[');
  if (open < 0) {
    if (/[\]\s]/.test(item)) throw new HostlistError(whole, `bad name '${item}'`);
    return [item];
  }
  const close = item.indexOf(']', open);
  if (close < 0) throw new HostlistError(whole, "unbalanced '['");
  const prefix = item.slice(0, open);
  const body = item.slice(open + 1, close);
  const suffixes = expandItem(item.slice(close + 1), whole);
  const out: string[] = [];
  for (const num of expandRanges(body, whole)) {
    for (const s of suffixes) out.push(prefix + num + s);
    if (out.length > MAX_HOSTLIST_NAMES) throw new HostlistError(whole, 'too many names');
  }
  return out;
}

function expandRanges(body: string, whole: string): string[] {
  const out: string[] = [];
  for (const r of body.split(',')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(r);
    if (!m) throw new HostlistError(whole, `bad range '${r}'`);
    const lo = m[1] as string;
    const hi = m[2] ?? lo;
    const a = Number(lo);
    const b = Number(hi);
    if (b < a) throw new HostlistError(whole, `descending range '${r}'`);
    if (b - a >= MAX_HOSTLIST_NAMES) throw new HostlistError(whole, 'too many names');
    for (let i = a; i <= b; i++) out.push(String(i).padStart(lo.length, '0'));
  }
  return out;
}
