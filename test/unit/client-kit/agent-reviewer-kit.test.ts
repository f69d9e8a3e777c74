import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildClientKit, REVIEWER_SKILL_PATH, verifyClientKit } from '../../../client-kit/build.js';

/** ADR 0027: the kit ships the agent reviewer's model commands and the rules it answers by. */

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gpu-broker-kit-agent-'));
  await buildClientKit({ outDir: join(dir, 'kit'), url: 'https://gpu-host.example:8443' });
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('the agent reviewer in the client kit', () => {
  it('runs Claude Code with no tools and no MCP servers, and Codex read-only, prompt on stdin', async () => {
    const claude = await readFile(join(dir, 'kit/agent-reviewer/claude-model.sh'), 'utf8');
    expect(claude).toMatch(/exec claude -p --tools "" --strict-mcp-config/);
    const codex = await readFile(join(dir, 'kit/agent-reviewer/codex-model.sh'), 'utf8');
    expect(codex).toMatch(/exec codex exec --sandbox read-only .* -$/m);
    const readme = await readFile(join(dir, 'kit/agent-reviewer/README.md'), 'utf8');
    expect(readme).toContain('--role agent_reviewer');
    expect(readme).toContain('gpu-broker review agent --command');
  });

  it('the reviewer skill states the ceiling, the fence and the verdict format', async () => {
    const skill = await readFile(join(dir, 'kit', REVIEWER_SKILL_PATH), 'utf8');
    for (const s of [
      'NEEDS_PERSON',
      'UNTRUSTED SUBMITTED TEXT',
      '"revision_digest"',
      'no decision',
      'agent_ceiling',
    ])
      expect(skill).toContain(s);
    expect((await verifyClientKit(join(dir, 'kit'))).ok).toBe(true);
  });
});
