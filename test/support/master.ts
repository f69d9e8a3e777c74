import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { BrokerDeps } from '../../src/broker/deps.js';
import type { StatfsFn } from '../../src/broker/loops/storage-guard.js';
import { createPrincipal, revokePrincipal } from '../../src/broker/principals.js';
import { type RunningMaster, startMaster } from '../../src/main.js';
import { readTokenFile } from '../../src/master/data-dir.js';
import type { Clock } from '../../src/platform/clock.js';
import { type MasterConfig, type MasterConfigInput, parseConfig } from '../../src/platform/config.js';
import { type Logger, silentLogger } from '../../src/platform/logger.js';
import { createCaTrustingFetch } from '../../src/platform/tls.js';
import type { Role } from '../../src/store/principals-repo.js';
import type { Store } from '../../src/store/store.js';
import { callTool, connectMcpClient, type McpClientOptions, type ToolOutcome } from './mcp.js';
import { type RestClient, restClient } from './rest.js';
import { TEST_POLICY } from './spec.js';
import { makeTempDir, removeTempDir } from './temp.js';

/**
 * A real master for integration tests: `startMaster` on 127.0.0.1, port 0, TLS auto (the generated dev
 * CA), a temp data dir, a silent logger, and a policy that allows `/bin/sh` and node (TEST_POLICY).
 * Clients are the real MCP SDK client and fetch, both trusting only the generated CA.
 */

/** Options of {@link startTestMaster}. */
export interface TestMasterOptions {
  /** Config merged over the test defaults (`policy`, `timing`, `scheduling`, `tls` merge key by key). */
  config?: MasterConfigInput;
  /** Injected clock (e.g. a ManualClock); default the system clock. */
  clock?: Clock;
  /** Use this data dir (e.g. to restart on old data); default a fresh temp dir. */
  dataDir?: string;
  /** Default: a silent logger. */
  logger?: Logger;
  /** Remove the data dir on close; default true only when the harness made it. */
  removeDataDirOnClose?: boolean;
  /** The master's free-space reader (a fake disk); default `fs.statfs`. */
  statfs?: StatfsFn;
}

/** Row counts of the master's core tables: "bad input changed nothing" compares two of these. */
export type RowCounts = Record<(typeof COUNTED_TABLES)[number], number>;

const COUNTED_TABLES = [
  'principals',
  'proposals',
  'revisions',
  'reviews',
  'tasks',
  'idempotency_keys',
  'audit_events',
] as const;

/** A running test master and its clients. */
export interface TestMaster {
  /** `https://127.0.0.1:PORT` (http when the config turns TLS off). */
  url: string;
  /** PEM of the generated CA (null with TLS off). */
  caPem: string | null;
  caCertPath: string | null;
  dataDir: string;
  config: MasterConfig;
  master: RunningMaster;
  deps: BrokerDeps;
  store: Store;
  /** The bootstrap operator's token (read from `<dataDir>/operator.token`). */
  operatorToken: string;
  /** A fetch that trusts the master's CA. */
  fetch: typeof globalThis.fetch;
  /** Creates a principal in the master's store and returns its token. */
  createToken(name: string, roles: Role[], workerId?: string): string;
  /** Revokes a principal's token by name. */
  revokeToken(name: string): void;
  /** A connected SDK client with this bearer token (null: no Authorization header). Closed on close(). */
  mcpClient(token: string | null, opts?: McpClientOptions): Promise<Client>;
  /** `callTool` from ./mcp.ts, here for convenience. */
  callTool<T = Record<string, unknown>>(
    client: Client,
    name: string,
    args?: Record<string, unknown>,
  ): Promise<ToolOutcome<T>>;
  /** REST client (fetch with the CA) sending this bearer token (null: none). */
  rest(token: string | null): RestClient;
  /** Row counts of the core tables. */
  counts(): RowCounts;
  /** A fresh idempotency key. */
  key(): string;
  /** Closes this master (keeping its data) and starts a new one on the same data dir (same port by default). */
  restart(opts?: { samePort?: boolean; clock?: Clock }): Promise<TestMaster>;
  /** Closes clients and the master; removes the data dir unless `keepDataDir`. Idempotent. */
  close(opts?: { keepDataDir?: boolean }): Promise<void>;
}

const live = new Set<TestMaster>();

/** The test defaults with `input` merged over them. */
export function testConfig(input: MasterConfigInput = {}): MasterConfig {
  return parseConfig({
    ...input,
    listen: input.listen ?? '127.0.0.1:0',
    policy: { ...TEST_POLICY, ...(input.policy ?? {}) },
    ...(input.timing ? { timing: input.timing } : {}),
    ...(input.scheduling ? { scheduling: input.scheduling } : {}),
    ...(input.tls ? { tls: input.tls } : {}),
  });
}

/** Starts a master for a test; close it in `afterAll`/`afterEach` (or `closeAllTestMasters`). */
export async function startTestMaster(opts: TestMasterOptions = {}): Promise<TestMaster> {
  const ownsDir = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? makeTempDir('master');
  const removeOnClose = opts.removeDataDirOnClose ?? ownsDir;
  const config = testConfig(opts.config);
  let master: RunningMaster;
  try {
    master = await startMaster({
      dataDir,
      config,
      logger: opts.logger ?? silentLogger(),
      ...(opts.clock ? { clock: opts.clock } : {}),
      ...(opts.statfs ? { statfs: opts.statfs } : {}),
    });
  } catch (err) {
    if (ownsDir) removeTempDir(dataDir);
    throw err;
  }
  const caPem = master.caCertPath ? readFileSync(master.caCertPath, 'utf8') : null;
  const trusting = caPem ? createCaTrustingFetch(caPem) : null;
  const fetchFn = trusting?.fetch ?? globalThis.fetch;
  const clients: Client[] = [];
  const deps = master.deps;
  let closed = false;

  const tm: TestMaster = {
    url: master.url,
    caPem,
    caCertPath: master.caCertPath,
    dataDir,
    config,
    master,
    deps,
    store: deps.store,
    operatorToken: master.bootstrappedOperatorToken ?? readTokenFile(master.operatorTokenPath),
    fetch: fetchFn,
    createToken(name, roles, workerId) {
      return createPrincipal(deps, { name, roles, worker_id: workerId }, 'test').token;
    },
    revokeToken(name) {
      revokePrincipal(deps, name, 'test');
    },
    async mcpClient(token, clientOpts) {
      const client = await connectMcpClient(master.url, token, fetchFn, clientOpts);
      clients.push(client);
      return client;
    },
    callTool: (client, name, args) => callTool(client, name, args),
    rest: (token) => restClient(master.url, token, fetchFn),
    counts() {
      const out = {} as RowCounts;
      for (const t of COUNTED_TABLES)
        out[t] = (deps.store.db.prepare(`SELECT count(*) AS n FROM ${t}`).get() as { n: number }).n;
      return out;
    },
    key: () => randomUUID(),
    async restart(restartOpts = {}) {
      const port = new URL(master.url).port;
      await tm.close({ keepDataDir: true });
      const next = await startTestMaster({
        dataDir,
        config: {
          ...(opts.config ?? {}),
          listen: restartOpts.samePort === false ? '127.0.0.1:0' : `127.0.0.1:${port}`,
        },
        ...(restartOpts.clock ? { clock: restartOpts.clock } : opts.clock ? { clock: opts.clock } : {}),
        ...(opts.logger ? { logger: opts.logger } : {}),
        // The restarted master takes over the duty to remove the directory, if this one had it.
        removeDataDirOnClose: removeOnClose,
      });
      return next;
    },
    async close(closeOpts = {}) {
      if (closed) return;
      closed = true;
      live.delete(tm);
      await Promise.allSettled(clients.splice(0).map((c) => c.close()));
      await master.close();
      await trusting?.close();
      if (!closeOpts.keepDataDir && removeOnClose) removeTempDir(dataDir);
    },
  };
  live.add(tm);
  return tm;
}

/** Closes every test master still running in this process (a safety net for `afterAll`). */
export async function closeAllTestMasters(): Promise<void> {
  await Promise.allSettled([...live].map((m) => m.close()));
}
