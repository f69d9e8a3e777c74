import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createCaTrustingFetch } from '../src/platform/tls.js';
import { BenchClients, keySequence } from './harness.js';
import {
  FLOODS,
  type FloodContext,
  type FloodSizes,
  type RunningFlood,
  type ScenarioName,
} from './noisy-floods.js';
import type { ToolFloodPrep } from './noisy-tool-floods.js';
import type { RawTarget } from './raw-https.js';

/**
 * The floods of the noisy-neighbour bench in their own process at the lowest CPU priority (`nice -n 19`):
 * the flooding client stands in for another agent on another host, so its own work (TLS encryption,
 * hashing, JSON of the answers it reads) must not take the 2 cores from the master and from the measured
 * neighbours. The master still gets every request of the flood; only the flood's client side yields the
 * CPU when the measured processes want it. NOISY_FLOOD_PROCESS=inline keeps the old mode (the floods in
 * the bench's own event loop, at its priority), so both can be measured and compared.
 *
 * Protocol over the IPC channel: the parent sends the config; the child answers `{ started: true }` once
 * the flood is under way (or `{ error }`), then `{ notes }` after the parent's `'stop'`, and exits.
 */

/** The floods that can run in the child: those that need only a token and the master's address. */
export const CHILD_FLOODS: ReadonlySet<ScenarioName> = new Set([
  'uploads',
  'diffs',
  'slow',
  'longpolls',
  'explain',
]);

/** The child floods that speak MCP as the flooder (the others raw HTTPS with its token). */
const FLOODER_MCP: ReadonlySet<ScenarioName> = new Set(['explain']);

/** What the child needs to start a flood (all of it serialisable). */
export interface ChildFloodConfig {
  name: ScenarioName;
  target: RawTarget;
  flooderToken: string;
  diffReaderToken: string;
  diff: { proposal_id: string; revision_id: string } | null;
  sizes: FloodSizes;
  keyPrefix: string;
  neighbourTarget: RawTarget;
  tools: ToolFloodPrep;
}

type FromChild = { started: true } | { error: string } | { notes: string };

const CHILD_PATH = fileURLToPath(import.meta.url);

/** Starts flood `cfg.name` in a child process at nice 19; resolves once it is under way. */
export async function startChildFlood(cfg: ChildFloodConfig): Promise<RunningFlood> {
  const child = spawn('nice', ['-n', '19', process.execPath, CHILD_PATH], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const messages: FromChild[] = [];
  let wake: (() => void) | null = null;
  child.on('message', (m) => {
    messages.push(m as FromChild);
    wake?.();
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => wake?.());
  const next = async (): Promise<FromChild> => {
    for (;;) {
      const m = messages.shift();
      if (m) return m;
      if (child.exitCode !== null || child.signalCode !== null)
        return { error: `the flood child exited (${child.exitCode ?? child.signalCode})` };
      await new Promise<void>((r) => {
        wake = r;
      });
      wake = null;
    }
  };
  child.send(cfg);
  const first = await next();
  if (!('started' in first)) {
    child.kill('SIGKILL');
    throw new Error('error' in first ? first.error : 'the flood child did not start');
  }
  return {
    async stop() {
      child.send('stop');
      const last = await next();
      await exited;
      const notes = 'notes' in last ? last.notes : 'error' in last ? last.error : '';
      return `${notes} (client in its own process, nice 19)`;
    },
  };
}

/** The child's side: start the flood, say so, stop it when told, report, exit. */
async function childMain(): Promise<void> {
  const cfg = await new Promise<ChildFloodConfig>((resolve) =>
    process.once('message', (m) => resolve(m as ChildFloodConfig)),
  );
  const trusting = createCaTrustingFetch(cfg.target.caPem);
  const clients = new BenchClients(cfg.target.url, trusting.fetch, 'bench-noisy-flood');
  try {
    if (!CHILD_FLOODS.has(cfg.name)) throw new Error(`flood ${cfg.name} does not run in a child`);
    // The diff flood uses an MCP session (the reader's), the explain flood the flooder's; the others
    // speak raw HTTPS with the token.
    const reader = cfg.name === 'diffs' ? await clients.connect(cfg.diffReaderToken) : null;
    const flooder = FLOODER_MCP.has(cfg.name) ? await clients.connect(cfg.flooderToken) : null;
    const unused = new Proxy({} as FloodContext['flooder'], {
      get: () => {
        throw new Error('this flood has no MCP session in the child');
      },
    });
    const ctx: FloodContext = {
      target: cfg.target,
      flooderToken: cfg.flooderToken,
      flooder: flooder ?? unused,
      reviewer: unused,
      diffReader: reader ?? unused,
      diff: cfg.diff,
      sizes: cfg.sizes,
      nextKey: keySequence(cfg.keyPrefix),
      neighbourTarget: cfg.neighbourTarget,
      tools: cfg.tools,
      dataDir: '',
    };
    const flood = await FLOODS[cfg.name](ctx);
    const stopAsked = new Promise<void>((resolve) => process.once('message', () => resolve()));
    process.send?.({ started: true });
    await stopAsked;
    process.send?.({ notes: await flood.stop() });
  } catch (err) {
    process.send?.({ error: String((err as Error).message ?? err) });
  } finally {
    await clients.close();
    await trusting.close();
    process.disconnect?.();
  }
}

if (process.argv[1] === CHILD_PATH && process.send) void childMain();
