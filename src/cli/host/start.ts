import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { startWorker } from '../../../worker/daemon/start-worker.js';
import { sharedSpawner } from '../../../worker/local/spawner.js';
import { type SamplerChoice, selectSampler } from '../../../worker/samplers/select-sampler.js';
import { type ContainerEngineChoice, parseContainerEngine } from '../../../worker/sandbox/container.js';
import { parseSandboxEngine, type SandboxEngineChoice } from '../../../worker/sandbox/native.js';
import { type RunAs, resolveRunAs } from '../../../worker/sandbox/run-as.js';
import {
  IsolationUnavailableError,
  type PreparedSandbox,
  parseIsolation,
  prepareSandbox,
  type SandboxChoice,
} from '../../../worker/sandbox/setup.js';
import type { BrokerDeps } from '../../broker/deps.js';
import { authenticate, createPrincipal } from '../../broker/principals.js';
import { BrokerError } from '../../contracts/errors.js';
import { type RunningMaster, startMaster } from '../../main.js';
import { writeSecretFile } from '../../platform/file-modes.js';
import { createLogger } from '../../platform/logger.js';
import { parseCommand } from '../common/args.js';
import type { CommandRunner } from '../common/io.js';
import { dataDirOf } from '../common/local.js';
import { reportError } from '../common/output.js';
import { START } from './command-specs.js';
import { configFromFlags } from './serve.js';
import {
  ensureStarterConfig,
  policyBannerLines,
  type StarterAction,
  starterBannerLines,
} from './starter-config.js';

/**
 * `gpu-broker start`: the quick start. Initialises the data dir, starts the master and one local worker
 * in this process (real cards when nvidia-smi or hy-smi work, clearly labelled simulated cards
 * otherwise), makes an agent (submitter) and a reviewer token on first start, and prints the MCP client
 * configuration for Claude Code, Codex and stdio-only harnesses.
 */

/** Reads a token file if its token still authenticates; otherwise creates the principal anew. */
function ensureToken(
  deps: Parameters<typeof createPrincipal>[0],
  file: string,
  name: string,
  roles: string[],
  workerId?: string,
): string {
  if (existsSync(file)) {
    const token = readFileSync(file, 'utf8').trim();
    try {
      authenticate(deps, token);
      return token;
    } catch {
      // revoked or from another database: make a new one below
    }
  }
  let unique = name;
  for (let i = 2; deps.store.principals.findByName(unique); i++) unique = `${name}-${i}`;
  const { token } = createPrincipal(deps, { name: unique, roles, worker_id: workerId }, 'start');
  writeSecretFile(file, `${token}\n`);
  return token;
}

/**
 * Where the local worker keeps its state. Inside the master's data dir normally; with --run-as a
 * sibling dir instead, because tasks must be able to traverse to their execution dirs and the master's
 * data dir (tokens, database) stays 0700. The worker creates it 0711 then (worker/daemon/data-dir-modes.ts).
 */
function workerDataDir(dataDir: string, separate: boolean): string {
  return separate ? `${dataDir}-worker` : join(dataDir, 'worker');
}

/**
 * The local worker's isolation: `auto` (default) sandboxes with bubblewrap when it works and, unlike
 * `gpu-broker worker`, falls back to running unisolated so the quick start works anywhere — the banner,
 * the dashboard and `status` then say UNISOLATED, and this master's policy turns require_isolation off
 * so the demo runs. `--run-as` means the unsandboxed layout.
 */
async function localSandbox(
  flag: string | undefined,
  runAs: boolean,
  choice: Omit<SandboxChoice, 'isolation'>,
): Promise<PreparedSandbox> {
  const isolation = parseIsolation(flag ?? (runAs ? 'none' : 'auto'));
  if (runAs && isolation !== 'none')
    throw new BrokerError(
      'INVALID_INPUT',
      '--run-as applies to --isolation none only',
      'Drop --run-as: sandboxed tasks each get a uid of their own.',
    );
  try {
    const sandbox = await prepareSandbox({ ...choice, isolation });
    return sandbox.isolation === 'none'
      ? { ...sandbox, summary: unisolatedSummary('--isolation none') }
      : sandbox;
  } catch (err) {
    if (!(err instanceof IsolationUnavailableError) || isolation !== 'auto') throw err;
    const unisolated = await prepareSandbox({ ...choice, isolation: 'none' });
    return { ...unisolated, summary: fallbackSummary(err.message, process.getuid?.() === 0) };
  }
}

/**
 * The `tasks:` line of an UNISOLATED local worker, `how` it came to be one. Not the worker's own line,
 * which adds that the master places no task there unless require_isolation is off: this development
 * master turns it off, and the banner's `policy:` line says so once.
 */
export function unisolatedSummary(how: string): string {
  return `UNISOLATED (${how}): tasks run as plain processes that can see this host`;
}

/**
 * The `tasks:` line when `auto` found no working bubblewrap: not "(--isolation none)", which the user
 * did not pass, but why, and the exact command (after which a restart also widens the starter config).
 */
export function fallbackSummary(why: string, root: boolean): string {
  const install = `${root ? '' : 'sudo '}apt-get install -y bubblewrap`;
  return `${unisolatedSummary('no working bubblewrap')}. Why: ${why.replace(/\. Install it.*$/, '')}. Install bubblewrap (${install}) and restart`;
}

/**
 * The `containers:` line: the engine's own line less its "container tasks: " label, which the banner's
 * label already says.
 */
export function containersLine(containerSummary: string): string {
  return containerSummary.replace(/^container tasks: /, '');
}

/** `--container-engine` (default auto: podman, then docker, else none; never fatal). */
function parseEngineFlag(flag: string | undefined): ContainerEngineChoice {
  try {
    return parseContainerEngine(flag ?? 'auto');
  } catch (err) {
    throw new BrokerError(
      'INVALID_INPUT',
      (err as Error).message,
      'Pass --container-engine auto, podman, docker or none.',
    );
  }
}

function parseSandboxEngineFlag(flag: string | undefined): SandboxEngineChoice {
  try {
    return parseSandboxEngine(flag ?? 'auto');
  } catch (err) {
    throw new BrokerError(
      'INVALID_INPUT',
      (err as Error).message,
      'Pass --sandbox-engine auto, bwrap or native.',
    );
  }
}

/** The local worker's id unless `--id` names one: `local-<hostname>`, lower case, safe characters. */
function localWorkerId(id: string | undefined): string {
  return (
    id ??
    `local-${hostname()
      .toLowerCase()
      .replace(/[^a-z0-9._-]/g, '-')}`
  );
}

/** The tokens `start` keeps in the data dir: the local worker's, and the agent's and reviewer's files. */
function ensureStartTokens(deps: BrokerDeps, dataDir: string, workerId: string) {
  const workerToken = ensureToken(deps, join(dataDir, 'worker.token'), 'local-worker', ['worker'], workerId);
  const agentTokenFile = join(dataDir, 'agent.token');
  const reviewerTokenFile = join(dataDir, 'reviewer.token');
  ensureToken(deps, agentTokenFile, 'agent', ['submitter']);
  ensureToken(deps, reviewerTokenFile, 'reviewer', ['reviewer']);
  return { workerToken, agentTokenFile, reviewerTokenFile };
}

/** What the banner tells: where everything is and how to connect. */
interface StartedLocally {
  master: RunningMaster;
  dataDir: string;
  workerId: string;
  choice: SamplerChoice;
  sandbox: PreparedSandbox;
  configFile: string;
  starter: { action: StarterAction } | null;
  runAs: RunAs | undefined;
  agentTokenFile: string;
  reviewerTokenFile: string;
}

/** The banner on stderr: where things are, what runs how, and how agents and people connect. */
function startBanner(s: StartedLocally): string {
  const { master, agentTokenFile, reviewerTokenFile, configFile, starter, runAs } = s;
  const ca = master.caCertPath;
  const mcpUrl = `${master.url}/mcp`;
  const banner = [
    '',
    `gpu-broker is running at ${master.url}`,
    `  data dir:        ${s.dataDir}`,
    ca ? `  CA certificate:  ${ca}` : '  TLS:             off (loopback only)',
    `  operator token:  ${master.operatorTokenPath}`,
    `  agent token:     ${agentTokenFile}   (role submitter)`,
    `  reviewer token:  ${reviewerTokenFile}   (role reviewer)`,
    `  local worker:    ${s.workerId} — ${s.choice.simulated ? `${s.choice.summary} (these are NOT real GPUs)` : s.choice.summary}`,
    `  tasks:           ${s.sandbox.summary}`,
    `  started by:      ${sharedSpawner().describe()}`,
    s.sandbox.isolation === 'none'
      ? '  policy:          require_isolation is OFF for this development master, so it places tasks on this worker anyway'
      : null,
    `  containers:      ${containersLine(s.sandbox.containerSummary)}`,
    ...(starter === null
      ? [`  config:          ${configFile}`]
      : starterBannerLines(configFile, starter.action, s.sandbox.isolation !== 'none')),
    ...policyBannerLines(master.deps.config.policy),
    runAs ? `  tasks run as:    ${runAs.name} (uid ${runAs.uid})` : null,
    `  dashboard:       ${master.url}/ (sign in with the contents of a token file above)`,
    '',
    'Connect an agent (in the agent’s shell):',
    `  export GPU_BROKER_TOKEN=$(cat ${agentTokenFile})`,
    // Added to the public roots, never instead of them: SSL_CERT_FILE would replace the system trust
    // store for everything else run in that shell (docs/clients.md).
    ca ? `  export NODE_EXTRA_CA_CERTS=${ca} CODEX_CA_CERTIFICATE=${ca}` : null,
    '',
    'Claude Code:',
    `  claude mcp add --transport http gpu-broker ${mcpUrl} --header "Authorization: Bearer \${GPU_BROKER_TOKEN}"`,
    '',
    'Codex (~/.codex/config.toml):',
    '  [mcp_servers.gpu-broker]',
    `  url = "${mcpUrl}"`,
    '  bearer_token_env_var = "GPU_BROKER_TOKEN"',
    '  tool_timeout_sec = 60',
    '',
    'Any stdio-only MCP client:',
    `  command: npx gpu-broker mcp-stdio --url ${master.url}${ca ? ` --ca-file ${ca}` : ''}   (env GPU_BROKER_TOKEN)`,
    '',
    'Review proposals as a person:',
    `  GPU_BROKER_URL=${master.url} GPU_BROKER_TOKEN_FILE=${reviewerTokenFile}${ca ? ` GPU_BROKER_CA_FILE=${ca}` : ''} npx gpu-broker review list`,
    '',
    `Allow more in ${configFile} (policy.executables, then restart) or pass --config FILE. Ctrl-C stops everything.`,
    '',
  ];
  const lines = banner.filter((l): l is string => l !== null);
  return lines.filter((l, i, a) => !(l === '' && a[i - 1] === '')).join('\n');
}

/** The line `start --json` prints on stdout. */
function startJson(s: StartedLocally): string {
  return `${JSON.stringify({ url: s.master.url, ca_file: s.master.caCertPath, worker_id: s.workerId, simulated: s.choice.simulated, sampler: s.choice.summary, agent_token_file: s.agentTokenFile, reviewer_token_file: s.reviewerTokenFile, operator_token_file: s.master.operatorTokenPath })}\n`;
}

/** The `start` command. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(START, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  try {
    const dataDir = dataDirOf(values, io);
    // Checked before anything starts, so a bad value leaves no master running.
    const containerEngine = parseEngineFlag(values['container-engine']);
    const sandboxEngine = parseSandboxEngineFlag(values['sandbox-engine']);
    const workerId = localWorkerId(values.id);
    // The local worker's sandbox is decided first: when it runs unisolated (no bubblewrap here, or
    // --isolation none), this development master lets it run tasks (require_isolation off) and says so.
    const runAs = values['run-as'] === undefined ? undefined : resolveRunAs(values['run-as']);
    const choice = await selectSampler({ gpus: values.gpus ?? 'auto', env: io.env, simSeed: workerId });
    const workerDir = workerDataDir(dataDir, runAs !== undefined);
    const sandbox = await localSandbox(values.isolation, runAs !== undefined, {
      dataDir: workerDir,
      hiddenPaths: [dataDir],
      sampler: choice.sampler,
      containerEngine,
      sandboxEngine,
    });
    const unisolated = sandbox.isolation === 'none';
    // Without --config, the starter config in the data dir (written on first start; see starter-config.ts).
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    const starter = values.config === undefined ? ensureStarterConfig(dataDir, !unisolated) : null;
    const configFile = values.config ?? starter!.path;
    const config = configFromFlags({ ...values, config: configFile });
    const master = await startMaster({
      dataDir,
      logger: createLogger(io.env['GPU_BROKER_LOG_LEVEL'] ?? 'info', { buffered: true }),
      config: unisolated ? { ...config, policy: { ...config.policy, require_isolation: false } } : config,
    });
    const deps = master.deps;
    const { workerToken, agentTokenFile, reviewerTokenFile } = ensureStartTokens(deps, dataDir, workerId);

    const worker = await startWorker({
      masterUrl: master.url,
      token: workerToken,
      workerId,
      dataDir: workerDir,
      sampler: choice.sampler,
      ...(master.caCertPath ? { ca: readFileSync(master.caCertPath, 'utf8') } : {}),
      logger: deps.logger.child({ component: 'worker' }),
      ...(runAs === undefined ? {} : { runAs }),
      sandbox: sandbox.setup,
      ...(sandbox.containers === undefined ? {} : { containers: sandbox.containers }),
    });
    const started: StartedLocally = {
      master,
      dataDir,
      workerId,
      choice,
      sandbox,
      configFile,
      starter,
      runAs,
      agentTokenFile,
      reviewerTokenFile,
    };
    io.stderr(startBanner(started));
    if (values.json) io.stdout(startJson(started));
    await io.stopSignal;
    await worker.close();
    await master.close();
    return 0;
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
