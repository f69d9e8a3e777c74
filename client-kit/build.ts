import { createHash, X509Certificate } from 'node:crypto';
import type { Dirent } from 'node:fs';
import { lstat, mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, posix, relative, sep } from 'node:path';
import { z } from 'zod';
import { packageRoot } from '../src/platform/package-root.js';
import { mcpEndpoint } from './stdio-bridge-command.js';

/**
 * The client kit (docs/clients.md): the skill, example specs and harness configs rendered for one master
 * URL, plus the master's CA certificate when it uses the dev CA. A kit is handed to people and agents,
 * so it must never carry a token or a private key, and it is sealed twice: MANIFEST.json (sizes and
 * sha256 per file) and SHA256SUMS (the same digests plus MANIFEST.json's, checkable with
 * `sha256sum -c` on a machine without gpu-broker). `verifyClientKit` checks that both agree with each
 * other and with the files.
 *
 * Sources live in the package's client-kit/: SKILL.md and examples/ go to skills/gpu-broker/,
 * REVIEWER.md (the reviewer's skill: who wrote which field, what to read before approving) to
 * skills/gpu-broker-review/SKILL.md, and templates/ to the kit root. `{{BROKER_URL}}` and `{{MCP_URL}}` are the only placeholders.
 */

/** Options of {@link buildClientKit}. */
export interface BuildClientKitOptions {
  /** Where to write the kit: a new or empty directory. */
  outDir: string;
  /** The master, e.g. `https://gpu-host:8443` (with or without `/mcp`). */
  url: string;
  /** The master's CA certificate (`<data-dir>/tls/ca.pem`) to ship as `ca.pem`. */
  caFile?: string;
  /** Creation time recorded in the manifest; tests pin it. */
  now?: Date;
  /**
   * The bundled stdio bridge to ship as {@link BRIDGE_KIT_PATH} (`client-kit build` passes
   * {@link defaultBridgeBundle}); absent: the kit has no bridge (kits made for http-only harnesses,
   * such as the qualification's claude/codex submitters).
   */
  bridgeBundle?: string;
}

/**
 * A PEM private key block. Matched as a whole header, not the bare words: the bundled bridge contains
 * PEM parsing code with the text "PRIVATE KEY" in it.
 */
const PEM_PRIVATE_KEY = /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----/;

/** The reviewer's skill inside a kit (source: client-kit/REVIEWER.md). */
export const REVIEWER_SKILL_PATH = 'skills/gpu-broker-review/SKILL.md';

/**
 * Files every kit carries, whatever it was built for: a kit whose manifest lacks one (an old build, or
 * one trimmed by hand) does not verify, so no submitter or reviewer is handed a kit without its guidance.
 */
export const REQUIRED_KIT_FILES = ['README.md', 'skills/gpu-broker/SKILL.md', REVIEWER_SKILL_PATH] as const;

/** The path of the bundled stdio bridge inside a kit. */
export const BRIDGE_KIT_PATH = 'stdio/gpu-broker-stdio-bridge.mjs';

/**
 * The bundled stdio bridge (one file needing only Node) that `npm run build:bridge` writes and every kit
 * carries, so an agent machine needs neither this package nor its native dependencies.
 */
export function defaultBridgeBundle(): string {
  return join(packageRoot(), 'dist', 'client-kit', 'gpu-broker-stdio-bridge.mjs');
}

/** One file of a kit as MANIFEST.json lists it. */
export interface ClientKitFile {
  /** Path relative to the kit root, `/`-separated. */
  path: string;
  /** Lowercase hex sha256 of the file's bytes. */
  sha256: string;
  /** Size in bytes. */
  size: number;
}

/** MANIFEST.json of a kit. */
export const ClientKitManifestSchema = z.strictObject({
  format: z.literal(1),
  version: z.string(),
  url: z.string(),
  mcp_url: z.string(),
  created_at: z.string(),
  files: z.array(
    z.strictObject({ path: z.string(), sha256: z.string().regex(/^[0-9a-f]{64}$/), size: z.number() }),
  ),
});

/** A parsed MANIFEST.json. */
export type ClientKitManifest = z.infer<typeof ClientKitManifestSchema>;

/** The kit's seal files, which are not listed in the manifest (the manifest cannot list itself). */
export const MANIFEST_FILE = 'MANIFEST.json';
/** Digest list in `sha256sum` format; it covers MANIFEST.json too. */
export const SUMS_FILE = 'SHA256SUMS';

/**
 * Renders a kit for one master URL into `outDir` (which must be absent or empty, so no stale file
 * ends up sealed into it). Returns every written path, relative to `outDir`, sorted.
 */
export async function buildClientKit(opts: BuildClientKitOptions): Promise<{ files: string[] }> {
  const mcpUrl = mcpEndpoint(opts.url);
  const brokerUrl = mcpUrl.href.replace(/\/mcp$/, '');
  // URL serialisation percent-encodes quotes and backslashes, so plain substitution cannot break
  // the JSON and TOML strings the placeholders sit in; checked rather than assumed.
  if (/["\\\s]/.test(mcpUrl.href)) throw new Error(`URL ${mcpUrl.href} cannot be rendered into configs`);

  const rendered = new Map<string, Buffer>();
  for (const source of await kitSources()) {
    const text = (await readFile(source.from, 'utf8'))
      .replaceAll('{{BROKER_URL}}', brokerUrl)
      .replaceAll('{{MCP_URL}}', mcpUrl.href);
    const leftover = text.match(/\{\{[A-Z_]+\}\}/);
    if (leftover) throw new Error(`template ${source.from} has an unknown placeholder ${leftover[0]}`);
    rendered.set(source.to, Buffer.from(text, 'utf8'));
  }
  if (opts.caFile !== undefined) rendered.set('ca.pem', await readCaCertificate(opts.caFile));
  if (opts.bridgeBundle !== undefined) {
    const bundle = opts.bridgeBundle;
    rendered.set(
      BRIDGE_KIT_PATH,
      await readFile(bundle).catch(() => {
        throw new Error(`${bundle} is missing: run \`npm run build:bridge\` (or npm run build) first`);
      }),
    );
  }
  for (const [path, bytes] of rendered) {
    if (PEM_PRIVATE_KEY.test(bytes.toString('latin1')))
      throw new Error(`refusing to write ${path}: it contains a private key`);
  }

  await prepareOutDir(opts.outDir);
  const files: ClientKitFile[] = [];
  for (const [path, bytes] of [...rendered].sort(([a], [b]) => compare(a, b))) {
    await writeKitFile(opts.outDir, path, bytes);
    files.push({ path, sha256: sha256(bytes), size: bytes.length });
  }

  const manifest: ClientKitManifest = {
    format: 1,
    version: await packageVersion(),
    url: brokerUrl,
    mcp_url: mcpUrl.href,
    created_at: (opts.now ?? new Date()).toISOString(),
    files,
  };
  const manifestBytes = Buffer.from(`${JSON.stringify(manifest, null, 2)}\n`, 'utf8');
  await writeKitFile(opts.outDir, MANIFEST_FILE, manifestBytes);
  const sums = [...files, { path: MANIFEST_FILE, sha256: sha256(manifestBytes), size: manifestBytes.length }]
    .sort((a, b) => compare(a.path, b.path))
    .map((f) => `${f.sha256}  ${f.path}\n`)
    .join('');
  await writeKitFile(opts.outDir, SUMS_FILE, Buffer.from(sums, 'utf8'));

  return { files: [...files.map((f) => f.path), MANIFEST_FILE, SUMS_FILE].sort(compare) };
}

/**
 * Checks a kit: MANIFEST.json and SHA256SUMS parse and agree, every listed file exists with its size
 * and digest, nothing else is present (no extra files, links or directories holding nothing listed),
 * every {@link REQUIRED_KIT_FILES} entry is listed, and no file holds a private key. Reports every problem found, not just the first.
 */
export async function verifyClientKit(dir: string): Promise<{ ok: boolean; problems: string[] }> {
  const problems: string[] = [];
  const present = await listTree(dir, problems);

  const manifestBytes = await readFile(join(dir, MANIFEST_FILE)).catch(() => undefined);
  let manifest: ClientKitManifest | undefined;
  if (!manifestBytes) problems.push(`missing: ${MANIFEST_FILE}`);
  else {
    try {
      manifest = ClientKitManifestSchema.parse(JSON.parse(manifestBytes.toString('utf8')));
    } catch (err) {
      problems.push(`${MANIFEST_FILE} is not a valid kit manifest: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  const sumsText = await readFile(join(dir, SUMS_FILE), 'utf8').catch(() => undefined);
  const sums = sumsText === undefined ? undefined : parseSums(sumsText, problems);
  if (sumsText === undefined) problems.push(`missing: ${SUMS_FILE}`);

  if (manifestBytes && sums) {
    const listed = sums.get(MANIFEST_FILE);
    if (listed === undefined) problems.push(`${SUMS_FILE} does not cover ${MANIFEST_FILE}`);
    else if (listed !== sha256(manifestBytes))
      problems.push(`altered: ${MANIFEST_FILE} (digest differs from ${SUMS_FILE})`);
  }

  const expected = new Map<string, ClientKitFile>();
  for (const file of manifest?.files ?? []) {
    if (!isSafeKitPath(file.path)) {
      problems.push(`${MANIFEST_FILE} lists an unsafe path: ${JSON.stringify(file.path)}`);
      continue;
    }
    expected.set(file.path, file);
  }
  if (manifest)
    for (const path of REQUIRED_KIT_FILES)
      if (!expected.has(path))
        problems.push(`${MANIFEST_FILE} does not list ${path}, which every kit carries`);
  if (manifest && sums) {
    for (const [path, file] of expected) {
      const digest = sums.get(path);
      if (digest === undefined)
        problems.push(`${SUMS_FILE} does not list ${path}, but ${MANIFEST_FILE} does`);
      else if (digest !== file.sha256)
        problems.push(`${MANIFEST_FILE} and ${SUMS_FILE} disagree about ${path}`);
    }
    for (const path of sums.keys()) {
      if (path !== MANIFEST_FILE && !expected.has(path)) {
        problems.push(`${SUMS_FILE} lists ${path}, but ${MANIFEST_FILE} does not`);
      }
    }
  }

  for (const [path, file] of expected) {
    if (!present.has(path)) {
      problems.push(`missing: ${path}`);
      continue;
    }
    const bytes = await readFile(join(dir, ...path.split('/')));
    if (bytes.length !== file.size || sha256(bytes) !== file.sha256) problems.push(`altered: ${path}`);
    if (PEM_PRIVATE_KEY.test(bytes.toString('latin1'))) problems.push(`${path} contains a private key`);
  }
  for (const path of present) {
    if (path !== MANIFEST_FILE && path !== SUMS_FILE && !expected.has(path) && manifest) {
      problems.push(`unexpected file: ${path}`);
    }
  }
  return { ok: problems.length === 0, problems };
}

interface KitSource {
  /** Absolute source path. */
  from: string;
  /** Path in the kit, `/`-separated. */
  to: string;
}

async function kitSources(): Promise<KitSource[]> {
  const base = join(packageRoot(), 'client-kit');
  const sources: KitSource[] = [
    { from: join(base, 'SKILL.md'), to: 'skills/gpu-broker/SKILL.md' },
    { from: join(base, 'REVIEWER.md'), to: REVIEWER_SKILL_PATH },
  ];
  for (const path of await walkFiles(join(base, 'examples'))) {
    sources.push({
      from: join(base, 'examples', ...path.split('/')),
      to: `skills/gpu-broker/examples/${path}`,
    });
  }
  for (const path of await walkFiles(join(base, 'templates'))) {
    sources.push({ from: join(base, 'templates', ...path.split('/')), to: path });
  }
  return sources;
}

/** Regular files under `root`, as sorted `/`-separated relative paths. */
async function walkFiles(root: string): Promise<string[]> {
  const entries = await readdir(root, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => relative(root, join(e.parentPath, e.name)).split(sep).join('/'))
    .sort(compare);
}

/** Every file in a kit directory; links and special files are reported as problems. */
async function listTree(dir: string, problems: string[]): Promise<Set<string>> {
  const files = new Set<string>();
  let entries: Dirent[];
  try {
    entries = await readdir(dir, { recursive: true, withFileTypes: true });
  } catch (err) {
    problems.push(`cannot read ${dir}: ${(err as Error).message}`);
    return files;
  }
  for (const entry of entries) {
    const path = relative(dir, join(entry.parentPath, entry.name)).split(sep).join('/');
    if (entry.isFile()) files.add(path);
    else if (entry.isSymbolicLink()) problems.push(`unexpected link: ${path}`);
    else if (!entry.isDirectory()) problems.push(`unexpected special file: ${path}`);
  }
  return files;
}

/** Parses `sha256sum` output lines (`<hex>  <path>` or binary-mode `<hex> *<path>`). */
function parseSums(text: string, problems: string[]): Map<string, string> {
  const sums = new Map<string, string>();
  for (const [i, line] of text.split('\n').entries()) {
    if (line === '') continue;
    const m = /^([0-9a-f]{64}) [ *](.+)$/.exec(line);
    if (!m) {
      problems.push(`${SUMS_FILE} line ${i + 1} is malformed`);
      continue;
    }
    const [, digest, path] = m as unknown as [string, string, string];
    if (sums.has(path)) problems.push(`${SUMS_FILE} lists ${path} twice`);
    sums.set(path, digest);
  }
  return sums;
}

function isSafeKitPath(path: string): boolean {
  return (
    path !== '' &&
    !path.startsWith('/') &&
    !path.includes('\\') &&
    !path.includes('\0') &&
    posix.normalize(path) === path &&
    !path.split('/').includes('..')
  );
}

/** Reads the CA certificate to ship, refusing anything that is not a lone CA certificate. */
async function readCaCertificate(caFile: string): Promise<Buffer> {
  const bytes = await readFile(caFile);
  const text = bytes.toString('utf8');
  if (text.includes('PRIVATE KEY')) {
    throw new Error(`${caFile} contains a private key; pass the CA certificate only (<data-dir>/tls/ca.pem)`);
  }
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(bytes);
  } catch {
    throw new Error(`${caFile} is not a PEM certificate`);
  }
  if (!cert.ca) {
    throw new Error(`${caFile} is not a CA certificate (a server certificate?); pass <data-dir>/tls/ca.pem`);
  }
  return bytes;
}

async function prepareOutDir(outDir: string): Promise<void> {
  const info = await lstat(outDir).catch(() => undefined);
  if (info && !info.isDirectory()) throw new Error(`${outDir} exists and is not a directory`);
  if (info && (await readdir(outDir)).length > 0) {
    throw new Error(`${outDir} is not empty; build the kit into a new directory`);
  }
  await mkdir(outDir, { recursive: true });
}

async function writeKitFile(outDir: string, path: string, bytes: Buffer): Promise<void> {
  const target = join(outDir, ...path.split('/'));
  await mkdir(dirname(target), { recursive: true });
  await writeFile(target, bytes, { mode: 0o644, flag: 'wx' });
}

async function packageVersion(): Promise<string> {
  const pkg = JSON.parse(await readFile(join(packageRoot(), 'package.json'), 'utf8')) as {
    version?: unknown;
  };
  return typeof pkg.version === 'string' ? pkg.version : '0.0.0';
}

function sha256(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Code-point order, so listings are identical whatever the locale. */
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
