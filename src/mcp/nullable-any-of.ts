/**
 * Rewrites JSON Schema type arrays such as `{"type": ["string", "null"]}` (what zod 4 emits for a
 * nullable primitive) into `{"anyOf": [{"type": "string"}, {"type": "null"}]}`. Both mean the same, but
 * some MCP clients (the MCP Inspector with --strict warns 43 times) and model providers accept only a
 * single `type` per schema; `anyOf` with `null` is the form they all handle (docs/operations.md).
 */

type Json = unknown;

/** Keywords that describe the value as a whole and stay outside the `anyOf`. */
const OUTER = new Set(['description', 'title', 'default', 'examples', '$schema']);

/** Returns a copy of `schema` with every type array rewritten as `anyOf`. */
export function nullableAsAnyOf(schema: Json): Json {
  if (Array.isArray(schema)) return schema.map(nullableAsAnyOf);
  if (schema === null || typeof schema !== 'object') return schema;
  const entries = Object.entries(schema as Record<string, Json>).map(
    ([k, v]) => [k, k === 'enum' || k === 'const' || k === 'required' ? v : nullableAsAnyOf(v)] as const,
  );
  const node = Object.fromEntries(entries) as Record<string, Json>;
  const type = node['type'];
  if (!Array.isArray(type)) return node;
  const outer: Record<string, Json> = {};
  const inner: Record<string, Json> = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === 'type') continue;
    (OUTER.has(k) ? outer : inner)[k] = v;
  }
  return {
    ...outer,
    anyOf: (type as string[]).map((t) => (t === 'null' ? { type: 'null' } : { ...inner, type: t })),
  };
}
