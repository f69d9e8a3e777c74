import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../../src/platform/package-root.js';
import { sourceFiles } from '../../support/import-graph.js';

/**
 * Comments and docs cite docs/ and the ADRs in the repository, never a design document outside it, an
 * issue of the tracker (`issue 35`) or a rule of the shared conventions (`CONVENTIONS rule 4`): a reader
 * of the code has the repository, not the session's shared notes or the tracker. `LEFT` (now
 * empty) is where a source file still to fix would be named; it only shrinks. `DOCS_LEFT` does the same
 * for the Markdown files under docs/ and README.md, each with its reason.
 */

const ROOT = packageRoot();
const OUTSIDE = /DESIGN §|DESIGN section|DESIGN\.md|shared\/reference\/|\bissues? \d|\bCONVENTIONS\b/i;
const LEFT = new Set<string>();
/** In docs, "DESIGN" in capitals is only ever that document. */
const DOCS_OUTSIDE = /\bDESIGN\b|DESIGN\.md|shared\/reference\//;
/** Documents allowed to cite one, each with its reason; empty now, and it may only shrink. */
const DOCS_LEFT = new Map<string, string>();

/** Lines of `files` (paths from the repository root) that match `pattern`, as `path:line: text`. */
function citing(files: string[], pattern: RegExp): string[] {
  return files.flatMap((f) =>
    readFileSync(join(ROOT, f), 'utf8')
      .split('\n')
      .flatMap((line, i) => (pattern.test(line) ? [`${f}:${i + 1}: ${line.trim()}`] : [])),
  );
}

/** README.md and every Markdown file under docs/. */
function markdownDocs(): string[] {
  const docs = readdirSync(join(ROOT, 'docs'), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f.split('\\').join('/')}`);
  return ['README.md', ...docs].sort();
}

describe('citations', () => {
  it('the pattern catches each kind of outside citation, and leaves in-repo ones alone', () => {
    for (const line of [
      '(issue 35, item 7)',
      'Issue 21: a flood',
      'issues 13 and 20',
      '(CONVENTIONS rule 4)',
      'DESIGN §3',
    ])
      expect(OUTSIDE.test(line), line).toBe(true);
    for (const line of [
      '(ADR 0043)',
      'docs/security.md "Terminal escapes"',
      'an issue with the lease',
      'rule 4 of the table',
    ])
      expect(OUTSIDE.test(line), line).toBe(false);
  });

  it('no source or test cites a document outside the repository', () => {
    const files = sourceFiles(ROOT, ['src', 'worker', 'test', 'qualification', 'client-kit']).filter(
      (f) => f !== 'test/unit/docs/in-repo-citations.test.ts' && !LEFT.has(f),
    );
    expect(citing(files, OUTSIDE)).toEqual([]);
  });

  it('no document in docs/ nor README.md cites a document outside the repository', () => {
    const files = markdownDocs();
    expect(files).toContain('docs/architecture.md');
    expect(files).toContain('docs/decisions/0001-stateless-mcp.md');
    expect(
      citing(
        files.filter((f) => !DOCS_LEFT.has(f)),
        DOCS_OUTSIDE,
      ),
    ).toEqual([]);
  });

  it('lists in DOCS_LEFT only documents that still cite one, so the list only shrinks', () => {
    for (const f of DOCS_LEFT.keys()) expect(citing([f], DOCS_OUTSIDE), f).not.toEqual([]);
  });
});
