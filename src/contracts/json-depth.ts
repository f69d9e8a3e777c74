/**
 * A nesting limit for every JSON value a client or worker sends, checked before anything recursive
 * (zod, canonical JSON, `JSON.stringify` for the size check) touches it: a spec nested 200,000 arrays deep
 * parses fine but overflows the stack of every recursive walk after (docs/state-machines.md). The deepest
 * legitimate input (a spec inside a tool call inside a message) is under 10 levels.
 */

/** Most levels of arrays and objects any input may nest. */
export const MAX_JSON_DEPTH = 64;

/** Whether `value` nests arrays/objects deeper than `max` levels; iterative, so it cannot overflow. */
export function jsonDepthExceeds(value: unknown, max: number = MAX_JSON_DEPTH): boolean {
  const stack: Array<{ value: unknown; depth: number }> = [{ value, depth: 0 }];
  while (stack.length > 0) {
    const { value: v, depth } = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (depth + 1 > max) return true;
    const children = Array.isArray(v) ? v : Object.values(v as Record<string, unknown>);
    for (const child of children) {
      if (child !== null && typeof child === 'object') stack.push({ value: child, depth: depth + 1 });
    }
  }
  return false;
}
