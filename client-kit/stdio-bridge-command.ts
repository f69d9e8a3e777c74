import { readFile } from 'node:fs/promises';
import type { Readable, Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { helpText } from '../src/platform/args.js';
import { createCaTrustingFetch, withSessionSignals } from '../src/platform/ca-fetch.js';
import { packageRoot } from '../src/platform/package-root.js';
import { runStdioBridge } from './stdio-bridge.js';
import { MCP_STDIO } from './stdio-bridge-spec.js';

/**
 * `gpu-broker mcp-stdio --url URL [--token-env NAME] [--ca-file FILE]`: argument and environment
 * handling around {@link runStdioBridge}. The token is read only from an environment variable, never
 * from argv, where `ps` and shell history would show it.
 */

/** What the command needs from its process: the protocol streams, stderr, env and a stop signal. */
export interface StdioBridgeCommandIo {
  /** MCP messages from the harness. */
  stdin: Readable;
  /** MCP messages to the harness; nothing else is ever written here. */
  stdout: Writable;
  /** Diagnostics. */
  stderr: (text: string) => void;
  /** The environment: GPU_BROKER_URL, GPU_BROKER_CA_FILE and the token variable. */
  env: Readonly<Record<string, string | undefined>>;
  /** Resolves on SIGTERM/SIGINT. */
  stopSignal?: Promise<void>;
}

/** Usage text of the command. */
export const STDIO_BRIDGE_USAGE = helpText(MCP_STDIO);

/** Why the command stops before serving: exit `code` (2 usage, 1 setup) and the line it prints. */
class CommandStop extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** The command's flags; a token on the command line, or an unknown flag, stops it (2). */
function parseFlags(argv: string[]): {
  url?: string | undefined;
  'token-env'?: string | undefined;
  'ca-file'?: string | undefined;
  help?: boolean | undefined;
} {
  if (argv.some((a) => a === '--token' || a.startsWith('--token=')))
    throw new CommandStop(
      2,
      'the token is never taken from the command line (ps and shell history would show it); ' +
        'export it as GPU_BROKER_TOKEN, or name another variable with --token-env',
    );
  try {
    return parseArgs({
      args: argv,
      options: {
        url: { type: 'string' },
        'token-env': { type: 'string' },
        'ca-file': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    // parseArgs adds advice about `--` after its first sentence; one line is enough here.
    throw new CommandStop(2, `${(err as Error).message.split(/\.\s/)[0]} (see: gpu-broker mcp-stdio --help)`);
  }
}

/** A fetch that trusts the CA certificate in `caFile` (not a key, a PEM certificate); stops the command (1) otherwise. */
async function caTrust(caFile: string): Promise<ReturnType<typeof createCaTrustingFetch>> {
  let caPem: string;
  try {
    caPem = await readFile(caFile, 'utf8');
  } catch (err) {
    throw new CommandStop(1, `cannot read --ca-file ${caFile}: ${(err as Error).message}`);
  }
  if (caPem.includes('PRIVATE KEY'))
    throw new CommandStop(
      1,
      `${caFile} contains a private key; pass the CA certificate (<data-dir>/tls/ca.pem) instead`,
    );
  if (!caPem.includes('BEGIN CERTIFICATE')) throw new CommandStop(1, `${caFile} holds no PEM certificate`);
  return createCaTrustingFetch(caPem);
}

/** What the bridge runs with, from the flags and the environment; stops the command (2) without a URL or token. */
function bridgeTarget(
  values: ReturnType<typeof parseFlags>,
  env: StdioBridgeCommandIo['env'],
): { mcpUrl: URL; token: string; tokenEnv: string } {
  const rawUrl = values.url ?? env['GPU_BROKER_URL'];
  if (!rawUrl)
    throw new CommandStop(2, '--url is required (or set GPU_BROKER_URL; see: gpu-broker mcp-stdio --help)');
  let mcpUrl: URL;
  try {
    mcpUrl = mcpEndpoint(rawUrl);
  } catch (err) {
    throw new CommandStop(2, (err as Error).message);
  }
  const tokenEnv = values['token-env'] ?? 'GPU_BROKER_TOKEN';
  const token = env[tokenEnv]?.trim();
  if (!token)
    throw new CommandStop(
      2,
      `no token: set ${tokenEnv} (create one with: gpu-broker token create --name NAME --role submitter)`,
    );
  return { mcpUrl, token, tokenEnv };
}

/** Runs the bridge; resolves with 0 when it ends normally, 2 on a usage error, 1 on a setup error. */
export async function runStdioBridgeCommand(argv: string[], io: StdioBridgeCommandIo): Promise<number> {
  const fail = (code: number, message: string): number => {
    io.stderr(`gpu-broker mcp-stdio: ${message}\n`);
    return code;
  };
  let trusting: ReturnType<typeof createCaTrustingFetch> | undefined;
  let target: ReturnType<typeof bridgeTarget>;
  try {
    const values = parseFlags(argv);
    if (values.help) {
      // Not serving, so stdout carries no protocol yet: help goes where every command's help goes.
      io.stdout.write(STDIO_BRIDGE_USAGE);
      return 0;
    }
    target = bridgeTarget(values, io.env);
    const caFile = values['ca-file'] ?? io.env['GPU_BROKER_CA_FILE'];
    if (caFile) trusting = await caTrust(caFile);
  } catch (err) {
    if (err instanceof CommandStop) return fail(err.code, err.message);
    throw err;
  }

  const log = (line: string) => io.stderr(`gpu-broker mcp-stdio: ${line}\n`);
  try {
    await runStdioBridge({
      mcpUrl: target.mcpUrl,
      token: target.token,
      tokenSource: target.tokenEnv,
      stdin: io.stdin,
      stdout: io.stdout,
      log,
      version: await packageVersion(),
      fetch: trusting ? trusting.fetch : withSessionSignals(globalThis.fetch),
      ...(io.stopSignal ? { stop: io.stopSignal } : {}),
    });
    return 0;
  } catch (err) {
    return fail(1, (err as Error).message);
  } finally {
    await trusting?.close();
  }
}

/**
 * The `/mcp` endpoint for a master URL given with or without the `/mcp` suffix. A bearer token must
 * not cross the network in clear, so plain `http:` is accepted only for loopback hosts, as the master
 * itself only listens without TLS there (docs/security.md).
 */
export function mcpEndpoint(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`not a URL: ${raw} (expected e.g. https://gpu-host:8443)`);
  }
  if (url.username || url.password)
    throw new Error('the URL must not contain credentials; the token goes in an env var');
  if (url.search || url.hash) throw new Error('the URL must not have a query or fragment');
  const loopback = ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname);
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && loopback)) {
    throw new Error(
      `${url.protocol}// is not allowed for ${url.host}: use https:// (plain http only on loopback)`,
    );
  }
  const path = url.pathname.replace(/\/+$/, '');
  url.pathname = path.endsWith('/mcp') ? path : `${path}/mcp`;
  return url;
}

async function packageVersion(): Promise<string> {
  try {
    const pkg = JSON.parse(await readFile(`${packageRoot()}/package.json`, 'utf8')) as { version?: unknown };
    return typeof pkg.version === 'string' ? pkg.version : '0.0.0';
  } catch {
    // The bridge must run even from an unusual install layout; the version is informational.
    return '0.0.0';
  }
}
