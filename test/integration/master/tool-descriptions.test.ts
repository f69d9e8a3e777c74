import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestMaster, type TestMaster } from '../../support/master.js';

/**
 * docs/operations.md (drift test): every property of every tool's input JSON Schema, as tools/list returns
 * it to a real MCP client, has a description an agent can act on — nested ones too (spec.cards.count,
 * spec.runtime.argv, …). Codex drops length and range limits from schemas, so the words must carry them.
 */

type Schema = {
  description?: string;
  properties?: Record<string, Schema>;
  items?: Schema | Schema[];
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  additionalProperties?: Schema | boolean;
};

/** Paths (tool.a.b) of properties without a non-empty description. */
function undescribed(schema: Schema, path: string, out: string[]): string[] {
  for (const [name, prop] of Object.entries(schema.properties ?? {})) {
    const here = `${path}.${name}`;
    if (!prop.description?.trim()) out.push(here);
    undescribed(prop, here, out);
  }
  const items = schema.items === undefined ? [] : Array.isArray(schema.items) ? schema.items : [schema.items];
  for (const s of [...items, ...(schema.anyOf ?? []), ...(schema.oneOf ?? []), ...(schema.allOf ?? [])])
    undescribed(s, path, out);
  if (typeof schema.additionalProperties === 'object')
    undescribed(schema.additionalProperties, `${path}.*`, out);
  return out;
}

let m: TestMaster;

beforeAll(async () => {
  m = await startTestMaster();
});

afterAll(async () => {
  await m?.close();
});

describe('tools/list input schemas', () => {
  it('describe every input property of every tool', async () => {
    const token = m.createToken('everyone', ['submitter', 'reviewer', 'operator', 'viewer']);
    const client = await m.mcpClient(token);
    const { tools } = await client.listTools();
    expect(tools.length).toBeGreaterThan(20);
    const missing = tools.flatMap((t) => undescribed(t.inputSchema as Schema, t.name, []));
    expect(missing).toEqual([]);
  });

  it('state the spec rules in words', async () => {
    const client = await m.mcpClient(m.createToken('sub', ['submitter']));
    const { tools } = await client.listTools();
    const create = tools.find((t) => t.name === 'create_proposal');
    const spec = (create?.inputSchema as Schema | undefined)?.properties?.['spec'];
    const text = JSON.stringify(spec).toLowerCase();
    for (const rule of ['absolute path', '$gpu_broker_output_dir', 'reserved', 'numbered 0..n-1'])
      expect(text).toContain(rule);
    expect(spec?.properties?.['network']?.description).toMatch(/"none".*"host"/);
  });
});

/** Paths of schemas whose `type` is an array (e.g. ["string","null"]). */
function typeArrays(schema: unknown, path: string, out: string[]): string[] {
  if (schema === null || typeof schema !== 'object') return out;
  if (Array.isArray((schema as { type?: unknown }).type)) out.push(path);
  for (const [k, v] of Object.entries(schema as Record<string, unknown>))
    if (k !== 'enum' && k !== 'const') typeArrays(v, `${path}.${k}`, out);
  return out;
}

describe('tools/list schemas use forms every client handles', () => {
  it('write nullable types as anyOf with null, never as a type array', async () => {
    const client = await m.mcpClient(m.createToken('all-2', ['submitter', 'reviewer', 'operator', 'viewer']));
    const { tools } = await client.listTools();
    const arrays = tools.flatMap((t) => [
      ...typeArrays(t.inputSchema, `${t.name}.input`, []),
      ...typeArrays(t.outputSchema, `${t.name}.output`, []),
    ]);
    expect(arrays).toEqual([]);
    const listCards = tools.find((t) => t.name === 'list_cards');
    expect(JSON.stringify(listCards?.outputSchema)).toContain('{"type":"null"}');
  });
});
