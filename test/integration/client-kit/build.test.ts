import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { appendFile, mkdir, mkdtemp, readdir, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse as parseToml } from 'smol-toml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildClientKit, defaultBridgeBundle, verifyClientKit } from '../../../client-kit/build.js';
import type { CliIo } from '../../../src/cli/common/io.js';
import { run as clientKitCommand } from '../../../src/cli/operator/client-kit.js';
import { TaskSpecSchema } from '../../../src/contracts/task-spec.js';
import { packageRoot } from '../../../src/platform/package-root.js';
import { type DevTls, ensureDevTls } from '../../../src/platform/tls.js';

const URL_ = 'https://gpu-host.example:8443';
let work: string;
let tls: DevTls;
let bridge: string;
let n = 0;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'gpu-broker-kit-'));
  tls = await ensureDevTls(join(work, 'data'), {});
  // A stand-in for the esbuild bundle (test/integration/stdio-bridge-bundle.test.ts runs the real one).
  bridge = join(work, 'bridge.mjs');
  await writeFile(bridge, '#!/usr/bin/env node\n// bundled bridge\n');
  // The CLI ships the real bundle from dist/; build it once if this checkout has not yet.
  if (!existsSync(defaultBridgeBundle()))
    await promisify(execFile)(process.execPath, [join(packageRoot(), 'scripts', 'build-bridge.mjs')]);
}, 60_000);

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

/** A fresh kit in its own directory. */
async function kit(opts: { url?: string; caFile?: string } = {}): Promise<{ dir: string; files: string[] }> {
  const dir = join(work, `kit-${++n}`);
  const { files } = await buildClientKit({
    outDir: dir,
    url: opts.url ?? URL_,
    caFile: opts.caFile ?? tls.caCertPath,
    bridgeBundle: bridge,
  });
  return { dir, files };
}

async function allFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
}

function captureIo(env: Record<string, string> = {}): CliIo & { out: () => string; err: () => string } {
  let out = '';
  let err = '';
  return {
    stdout: (t) => {
      out += t;
    },
    stderr: (t) => {
      err += t;
    },
    env,
    out: () => out,
    err: () => err,
  };
}

describe('buildClientKit', () => {
  it('writes the skill, examples, harness configs, the CA and the seals', async () => {
    const { dir, files } = await kit();
    expect(files).toEqual(
      expect.arrayContaining([
        'MANIFEST.json',
        'SHA256SUMS',
        'README.md',
        'ca.pem',
        'claude-code/.mcp.json',
        'claude-code/README.md',
        'codex/config.toml',
        'codex/README.md',
        'stdio/README.md',
        'stdio/mcp-servers.json',
        'stdio/gpu-broker-stdio-bridge.mjs',
        'skills/gpu-broker/SKILL.md',
        'skills/gpu-broker/examples/python-smoke-1card.json',
        'skills/gpu-broker/examples/torch-allreduce-2card.json',
      ]),
    );
    expect(await readFile(join(dir, 'ca.pem'), 'utf8')).toBe(tls.ca);
    const skill = await readFile(join(dir, 'skills/gpu-broker/SKILL.md'), 'utf8');
    expect(skill).toMatch(/^---\nname: gpu-broker\ndescription: .+\n---\n/);
    expect(skill).toContain(URL_);
    for (const file of await allFiles(dir))
      expect(await readFile(file, 'utf8')).not.toMatch(/\{\{[A-Z_]+\}\}/);
  });

  it('renders a Claude Code .mcp.json pointing at the URL with the token placeholder', async () => {
    const { dir } = await kit({ url: `${URL_}/mcp/` });
    const config = JSON.parse(await readFile(join(dir, 'claude-code/.mcp.json'), 'utf8'));
    expect(config).toEqual({
      mcpServers: {
        'gpu-broker': {
          type: 'http',
          url: `${URL_}/mcp`,
          // biome-ignore lint/suspicious/noTemplateCurlyInString: the literal placeholder is what Claude Code expands
          headers: { Authorization: 'Bearer ${GPU_BROKER_TOKEN}' },
        },
      },
    });
    const readme = await readFile(join(dir, 'claude-code/README.md'), 'utf8');
    expect(readme).toContain(
      `claude mcp add --transport http gpu-broker ${URL_}/mcp --header "Authorization: Bearer \${GPU_BROKER_TOKEN}"`,
    );
    const stdio = JSON.parse(await readFile(join(dir, 'stdio/mcp-servers.json'), 'utf8'));
    expect(stdio.mcpServers['gpu-broker'].command).toBe('node');
    expect(stdio.mcpServers['gpu-broker'].args).toEqual([
      '/ABSOLUTE/PATH/TO/KIT/stdio/gpu-broker-stdio-bridge.mjs',
      '--url',
      URL_,
      '--ca-file',
      expect.any(String),
    ]);
  });

  it('renders a Codex config.toml with url, bearer_token_env_var and a timeout above the 25 s waits', async () => {
    const { dir } = await kit();
    const toml = parseToml(await readFile(join(dir, 'codex/config.toml'), 'utf8')) as {
      mcp_servers: Record<string, Record<string, unknown>>;
    };
    const server = toml.mcp_servers['gpu-broker'];
    expect(server?.['url']).toBe(`${URL_}/mcp`);
    expect(server?.['bearer_token_env_var']).toBe('GPU_BROKER_TOKEN');
    expect(server?.['tool_timeout_sec']).toBeGreaterThan(25);
  });

  it('ships example specs that are valid task specs with absolute executables and relative outputs', async () => {
    const { dir, files } = await kit();
    const examples = files.filter((f) => f.startsWith('skills/gpu-broker/examples/') && f.endsWith('.json'));
    expect(examples.length).toBeGreaterThanOrEqual(2);
    for (const path of examples) {
      const spec = TaskSpecSchema.parse(JSON.parse(await readFile(join(dir, path), 'utf8')));
      expect(spec.runtime.argv[0]).toMatch(/^\//);
      for (const output of spec.outputs) expect(output.path).not.toMatch(/^\/|\.\./);
    }
    const twoCard = TaskSpecSchema.parse(
      JSON.parse(await readFile(join(dir, 'skills/gpu-broker/examples/torch-allreduce-2card.json'), 'utf8')),
    );
    expect(twoCard.cards.count).toBe(2);
  });

  it('leaves no trace of a token present in the environment', async () => {
    const secret = `secret-${Math.random().toString(36).slice(2)}-token-value`;
    const saved = process.env['GPU_BROKER_TOKEN'];
    process.env['GPU_BROKER_TOKEN'] = secret;
    try {
      const { dir } = await kit();
      for (const file of await allFiles(dir)) {
        const text = await readFile(file, 'utf8');
        expect(text).not.toContain(secret);
        expect(text).not.toMatch(/-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----/);
      }
    } finally {
      if (saved === undefined) delete process.env['GPU_BROKER_TOKEN'];
      else process.env['GPU_BROKER_TOKEN'] = saved;
    }
  });

  it('refuses a CA file holding a private key, a non-CA certificate, and a non-empty directory', async () => {
    const withKey = join(work, 'ca-with-key.pem');
    await writeFile(withKey, tls.ca + (await readFile(join(work, 'data/tls/ca-key.pem'), 'utf8')));
    const out = join(work, 'never-written');
    await expect(buildClientKit({ outDir: out, url: URL_, caFile: withKey })).rejects.toThrow(/private key/);
    await expect(readdir(out)).rejects.toThrow();

    await expect(buildClientKit({ outDir: out, url: URL_, caFile: tls.certPath })).rejects.toThrow(
      /not a CA/,
    );

    const busy = join(work, 'busy');
    await mkdir(busy);
    await writeFile(join(busy, 'keep.txt'), 'mine');
    await expect(buildClientKit({ outDir: busy, url: URL_ })).rejects.toThrow(/not empty/);
  });

  it('refuses URLs that would leak the token', async () => {
    await expect(buildClientKit({ outDir: join(work, 'u1'), url: 'http://gpu-host:8443' })).rejects.toThrow(
      /https/,
    );
    await expect(
      buildClientKit({ outDir: join(work, 'u2'), url: 'https://me:pw@gpu-host:8443' }),
    ).rejects.toThrow(/credentials/);
  });
});

describe('verifyClientKit', () => {
  it('accepts a fresh kit, which sha256sum -c also accepts', async () => {
    const { dir } = await kit();
    expect(await verifyClientKit(dir)).toEqual({ ok: true, problems: [] });
    const sha = await promisify(execFile)('sha256sum', ['-c', 'SHA256SUMS'], { cwd: dir }).catch(
      (err: NodeJS.ErrnoException) => err,
    );
    if ((sha as NodeJS.ErrnoException).code === 'ENOENT') return; // no coreutils here
    expect((sha as { stdout: string }).stdout).not.toMatch(/FAILED/);
  });

  it('catches an edited, an added and a removed file', async () => {
    const edited = await kit();
    await appendFile(join(edited.dir, 'codex/config.toml'), 'bearer_token = "x"\n');
    expect((await verifyClientKit(edited.dir)).problems).toEqual(['altered: codex/config.toml']);

    const added = await kit();
    await writeFile(join(added.dir, 'skills/gpu-broker/extra.md'), 'surprise');
    expect((await verifyClientKit(added.dir)).problems).toEqual([
      'unexpected file: skills/gpu-broker/extra.md',
    ]);

    const removed = await kit();
    await unlink(join(removed.dir, 'ca.pem'));
    expect((await verifyClientKit(removed.dir)).problems).toEqual(['missing: ca.pem']);
  });

  it('catches a manifest rewritten to match an edit when SHA256SUMS was not', async () => {
    const { dir } = await kit();
    const manifestPath = join(dir, 'MANIFEST.json');
    const manifest = JSON.parse(await readFile(manifestPath, 'utf8'));
    manifest.url = 'https://evil.example:8443';
    await writeFile(manifestPath, JSON.stringify(manifest, null, 2));
    const result = await verifyClientKit(dir);
    expect(result.ok).toBe(false);
    expect(result.problems).toContain('altered: MANIFEST.json (digest differs from SHA256SUMS)');

    const other = await kit();
    await unlink(join(other.dir, 'SHA256SUMS'));
    expect((await verifyClientKit(other.dir)).problems).toEqual(['missing: SHA256SUMS']);
  });
});

describe('gpu-broker client-kit', () => {
  it('builds with --json and verifies, exiting non-zero on a tampered kit', async () => {
    const dir = join(work, 'cli-kit');
    const io = captureIo({ GPU_BROKER_URL: URL_ });
    expect(await clientKitCommand(['build', '--out', dir, '--ca-file', tls.caCertPath, '--json'], io)).toBe(
      0,
    );
    const built = JSON.parse(io.out());
    expect(built.url).toBe(URL_);
    expect(built.files).toContain('ca.pem');
    expect(built.files).toContain('stdio/gpu-broker-stdio-bridge.mjs');

    const ok = captureIo();
    expect(await clientKitCommand(['verify', dir, '--json'], ok)).toBe(0);
    expect(JSON.parse(ok.out())).toEqual({ ok: true, problems: [] });

    await writeFile(join(dir, 'README.md'), 'changed');
    const bad = captureIo();
    expect(await clientKitCommand(['verify', dir], bad)).toBe(1);
    expect(bad.out()).toContain('altered: README.md');
  });

  it('reports usage errors with exit code 2', async () => {
    const io = captureIo();
    expect(await clientKitCommand(['build', '--url', URL_], io)).toBe(2);
    expect(io.err()).toContain('--out');
    expect(await clientKitCommand(['build', '--out', join(work, 'x')], captureIo())).toBe(2);
    expect(await clientKitCommand(['verify'], captureIo())).toBe(2);
    expect(await clientKitCommand(['frobnicate'], captureIo())).toBe(2);
  });
});
