import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../../src/platform/package-root.js';

/**
 * docs/operations.md: the supported Node versions are stated once in package.json `engines` and the README
 * says the same, and the Node running the tests is one of them (a test run on an unsupported Node says
 * so here first, not as a strange failure elsewhere).
 */

const root = packageRoot();
const engines = (
  JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { engines: { node: string } }
).engines.node;

/** `^A.B.C` ranges joined by `||`, the only form `engines` uses here. */
function satisfies(version: string, range: string): boolean {
  const [major, minor] = version.replace(/^v/, '').split('.').map(Number);
  return range.split('||').some((part) => {
    const m = /^\^(\d+)\.(\d+)\.\d+$/.exec(part.trim());
    if (!m) throw new Error(`unexpected engines range "${part.trim()}"`);
    return major === Number(m[1]) && (minor ?? 0) >= Number(m[2]);
  });
}

describe('supported Node versions', () => {
  it('the README states the engines range of package.json', () => {
    expect(readFileSync(join(root, 'README.md'), 'utf8')).toContain(`\`${engines}\``);
  });

  it('the Node running the tests is a supported one', () => {
    expect(satisfies(process.version, engines), `${process.version} vs ${engines}`).toBe(true);
    expect(satisfies('v20.18.0', engines)).toBe(false);
    expect(satisfies('v26.0.0', engines)).toBe(false);
  });
});
