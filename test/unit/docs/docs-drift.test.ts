import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { brokerTools } from '../../../src/broker/tools/catalog.js';
import { GRANT_TABLE } from '../../../src/domain/grants/grant.js';
import { LEASE_TABLE } from '../../../src/domain/machines/lease.js';
import { PROPOSAL_TABLE } from '../../../src/domain/machines/proposal.js';
import { QUALIFICATION_RUN_TABLE } from '../../../src/domain/machines/qualification-run.js';
import { TASK_TABLE } from '../../../src/domain/machines/task.js';
import { REST_ROUTES } from '../../../src/http/rest.js';
import { packageRoot } from '../../../src/platform/package-root.js';

/**
 * Facts in docs/ that are mechanical, checked against the code ("docs that are not true any
 * more"): how many tools each role sees in tools/list, every tool the REST mirror table names, the state
 * tables, and (ADR 0020) the folders: each one a newcomer could look for is named in the README's "What
 * is where" table or in docs/architecture.md, and every folder those name exists.
 */

const doc = (name: string) => readFileSync(join(packageRoot(), 'docs', name), 'utf8');
const seenBy = (role: string) =>
  brokerTools().filter((t) => (t.def.roles as readonly string[]).includes(role)).length;

describe('docs/mcp-tools.md', () => {
  const text = doc('mcp-tools.md').replace(/\s+/g, ' ');

  it('states the tools/list count of each role as the catalog has it', () => {
    const m = text.match(
      /a submitter token sees (\d+) tools, a reviewer (\d+), an operator (\d+), a viewer (\d+)/,
    );
    expect(m, 'the sentence with the per-role counts').not.toBeNull();
    expect(m!.slice(1).map(Number)).toEqual([
      seenBy('submitter'),
      seenBy('reviewer'),
      seenBy('operator'),
      seenBy('viewer'),
    ]);
  });

  it('lists every tool in the role table, and only real tools', () => {
    const names = new Set(brokerTools().map((t) => t.def.name));
    const table = doc('mcp-tools.md')
      .split('\n')
      .filter((l) => l.startsWith('| `'))
      .flatMap((l) => [...(l.split('|')[1] ?? '').matchAll(/`([a-z_]+)`/g)].map((x) => x[1]!));
    for (const n of table) expect(names, `${n} in the role table`).toContain(n);
    for (const n of names) expect(table, `${n} missing from the role table`).toContain(n);
  });

  it('names a real tool for every REST route it lists, and the tool the code routes there', () => {
    const rows = [...doc('mcp-tools.md').matchAll(/^\| (GET|POST) \| `([^`]+)` \| `([a-z_]+)` \|/gm)];
    expect(rows.length).toBeGreaterThan(10);
    const routed = new Map(REST_ROUTES.map((r) => [`${r.method} ${r.url}`, r.tool]));
    for (const [, method, url, tool] of rows)
      expect(routed.get(`${method} ${url}`), `${method} ${url}`).toBe(tool);
  });
});

describe('docs/state-machines.md', () => {
  /** The `| from \ event |` table under `## heading`, as {state: {event: cell}}. */
  function docTable(heading: string): Record<string, Record<string, string>> {
    const text = doc('state-machines.md');
    const section = text.slice(text.indexOf(`## ${heading}\n`));
    const lines = section.split('\n');
    const head = lines.findIndex((l) => l.startsWith('| from \\ event |'));
    expect(head, `a transition table under ## ${heading}`).toBeGreaterThan(0);
    const cells = (l: string) =>
      l
        .split('|')
        .slice(1, -1)
        .map((c) => c.trim().replace(/`/g, ''));
    const events = cells(lines[head]!).slice(1);
    const out: Record<string, Record<string, string>> = {};
    for (const line of lines.slice(head + 2)) {
      if (!line.startsWith('|')) break;
      const [state = '', ...row] = cells(line);
      out[state] = Object.fromEntries(events.map((e, i) => [e, row[i] ?? '']));
    }
    return out;
  }

  const cases = [
    ['Proposal', PROPOSAL_TABLE],
    ['Task', TASK_TABLE],
    ['Lease', LEASE_TABLE],
    ['Qualification run', QUALIFICATION_RUN_TABLE],
    ['Standing grants', GRANT_TABLE],
  ] as const;
  for (const [heading, table] of cases)
    it(`shows the ${heading.toLowerCase()} table exactly as the code has it`, () => {
      const shown = docTable(heading);
      const code = table as Record<string, Record<string, string | undefined>>;
      expect(Object.keys(shown).sort()).toEqual(Object.keys(code).sort());
      const events = new Set(Object.values(code).flatMap((row) => Object.keys(row)));
      for (const row of Object.values(shown)) expect(Object.keys(row).sort()).toEqual([...events].sort());
      for (const [state, row] of Object.entries(shown))
        for (const [event, cell] of Object.entries(row))
          expect(cell, `${heading} ${state} × ${event}`).toBe(code[state]?.[event] ?? '·');
    });
});

describe('folders (README "What is where", docs/architecture.md "Layers and import rules")', () => {
  const root = packageRoot();
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const from = readme.indexOf('## What is where');
  const whereTable = readme.slice(from, readme.indexOf('\n## ', from + 1));
  const architecture = doc('architecture.md');
  const layersStart = architecture.indexOf('## Layers and import rules');
  const layers = architecture.slice(layersStart, architecture.indexOf('\n## ', layersStart + 1));

  /** The folders directly under `dir` (package-relative), or every folder below it with `all`. */
  const folders = (dir: string, all = false): string[] =>
    readdirSync(join(root, dir), { recursive: all })
      .map((f) => `${dir}/${String(f).split('\\').join('/')}`)
      .filter((f) => statSync(join(root, f)).isDirectory())
      .sort();

  const required = [
    ...folders('src'),
    ...folders('src/broker'),
    ...folders('src/domain'),
    ...folders('src/cli'),
    ...folders('qualification'),
    ...folders('client-kit'),
    // Generic for the worker: every folder at any depth, so a new one cannot go unexplained.
    ...folders('worker', true),
  ];

  it('has folders to check', () => {
    expect(required).toContain('src/broker/tools');
    expect(required.length).toBeGreaterThan(15);
  });

  it.each(required)('names %s/ in the README table or docs/architecture.md', (folder) => {
    const named = `${whereTable}\n${architecture}`.includes(`${folder}/`);
    expect(named, `${folder}/ is named nowhere: add it to the table or the layers`).toBe(true);
  });

  it('names only folders that exist, in the README table and the layers of docs/architecture.md', () => {
    const named = `${whereTable}\n${layers}`.match(
      /(?<![\w/.-])(?:src|worker|qualification|client-kit|bench|test|docs)\/(?:[\w.-]+\/)*/g,
    );
    expect(named?.length ?? 0).toBeGreaterThan(15);
    const missing = [...new Set(named)].filter(
      (f) => !existsSync(join(root, f)) || !statSync(join(root, f)).isDirectory(),
    );
    expect(missing).toEqual([]);
  });
});
