import { spawn } from 'node:child_process';
import {
  accessSync,
  constants,
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import type { TaskSpec } from '../../src/contracts/task-spec.js';

/**
 * The real-harness submitters (`--submitter claude|codex`): the runner launches the agent's own CLI
 * non-interactively, configured with the client kit's MCP configuration for the master and the run's
 * submitter token, with a prompt that carries the run id and the exact spec to propose. What the agent
 * prints is only logged: the runner afterwards looks at what the master recorded, never at the agent's
 * account of it.
 */

/** Which CLI. */
export type AgentKind = 'claude' | 'codex';

/** The MCP tools the agent is allowed to call (Claude Code names them mcp__<server>__<tool>). */
export const AGENT_TOOLS = ['create_proposal', 'confirm_revision', 'get_proposal', 'list_cards'] as const;

/** Name of the MCP server in the client kit's configs. */
const SERVER_NAME = 'gpu-broker';

/** What one launch needs. */
export interface AgentLaunch {
  kind: AgentKind;
  /** A client kit built for this master (claude-code/.mcp.json, codex/config.toml). */
  kitDir: string;
  /** A private scratch directory for this launch (cwd, CODEX_HOME, the CA bundle). */
  workDir: string;
  /** The run's submitter token; it reaches the agent only through GPU_BROKER_TOKEN. */
  token: string;
  /** The master's CA certificate file, or null when its certificate is publicly trusted. */
  caFile: string | null;
  prompt: string;
  /** The environment the agent inherits (PATH finds the CLI; its own credentials pass through). */
  env: Readonly<Record<string, string | undefined>>;
  timeoutMs: number;
  signal?: AbortSignal | undefined;
}

/** How a launch ended. Only for the progress log: nothing here is evidence. */
export interface AgentOutcome {
  exit_code: number | null;
  signal: string | null;
  timed_out: boolean;
  /** The last few hundred bytes of stderr, for the operator. */
  stderr_tail: string;
}

/** Markers around the spec in the prompt, so a person (or a test) can find it. */
export const SPEC_BEGIN = '<spec>';
export const SPEC_END = '</spec>';

/** The prompt for one rung (`cards`: its count, or its label such as `8=2x4` for a two-node rung). */
export function agentPrompt(runId: string, cards: number | string, spec: TaskSpec): string {
  return [
    `You are the submitter of gpu-broker qualification run ${runId}, rung ${cards} card(s).`,
    'Use only the gpu-broker MCP tools, and do exactly this:',
    `1. Call create_proposal with idempotency_key "${runId}-${cards}-create" and this spec, unchanged:`,
    SPEC_BEGIN,
    JSON.stringify(spec, null, 2),
    SPEC_END,
    `2. Call confirm_revision with the proposal_id and revision_id that create_proposal returned, and idempotency_key "${runId}-${cards}-confirm".`,
    'Then stop. Do not review, approve or run anything yourself: an independent reviewer decides, and',
    `the broker runs the task. Run id: ${runId}.`,
  ].join('\n');
}

/** The argv and environment of a launch (separate from spawning, so it can be shown and checked). */
export function agentCommand(l: AgentLaunch): {
  command: string;
  args: string[];
  env: Record<string, string>;
} {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(l.env)) if (v !== undefined) env[k] = v;
  env['GPU_BROKER_TOKEN'] = l.token;
  if (l.kind === 'claude') {
    // Node reads NODE_EXTRA_CA_CERTS at start; it adds to the public roots.
    if (l.caFile !== null) env['NODE_EXTRA_CA_CERTS'] = l.caFile;
    return {
      command: 'claude',
      args: [
        '-p',
        l.prompt,
        '--mcp-config',
        join(l.kitDir, 'claude-code', '.mcp.json'),
        '--strict-mcp-config',
        '--allowedTools',
        AGENT_TOOLS.map((t) => `mcp__${SERVER_NAME}__${t}`).join(','),
        '--output-format',
        'json',
      ],
      env,
    };
  }
  const home = join(l.workDir, 'codex-home');
  env['CODEX_HOME'] = home;
  if (l.caFile !== null) {
    env['CODEX_CA_CERTIFICATE'] = l.caFile;
    // SSL_CERT_FILE replaces the trust store: give it the public roots plus the master's CA.
    env['SSL_CERT_FILE'] = join(l.workDir, 'ca-bundle.pem');
  }
  return {
    command: 'codex',
    args: ['exec', '--skip-git-repo-check', '--sandbox', 'read-only', l.prompt],
    env,
  };
}

/** Writes the files a launch reads: CODEX_HOME/config.toml (+ the operator's codex login), CA bundle. */
export function prepareAgentFiles(l: AgentLaunch): void {
  mkdirSync(l.workDir, { recursive: true, mode: 0o700 });
  if (l.kind !== 'codex') return;
  const home = join(l.workDir, 'codex-home');
  mkdirSync(home, { recursive: true, mode: 0o700 });
  // The kit's table, with tool approval off: `codex exec` has no one to ask, and the broker's own
  // review is the approval that matters. Top-level keys must precede the kit's [table].
  const kitToml = readFileSync(join(l.kitDir, 'codex', 'config.toml'), 'utf8');
  writeFileSync(join(home, 'config.toml'), `approval_policy = "never"\n\n${kitToml}`, { mode: 0o600 });
  // A fresh CODEX_HOME has no login; reuse the operator's, if the master's user has one.
  const operatorHome = l.env['CODEX_HOME'] ?? (l.env['HOME'] ? join(l.env['HOME'], '.codex') : null);
  const auth = operatorHome ? join(operatorHome, 'auth.json') : null;
  if (auth && existsSync(auth)) copyFileSync(auth, join(home, 'auth.json'));
  if (l.caFile !== null) {
    const system = '/etc/ssl/certs/ca-certificates.crt';
    const roots = existsSync(system) ? readFileSync(system, 'utf8') : '';
    writeFileSync(join(l.workDir, 'ca-bundle.pem'), `${roots}\n${readFileSync(l.caFile, 'utf8')}`);
  }
}

/** Launches the agent and waits for it to exit (or kills it at the timeout or on abort). */
export async function runAgent(l: AgentLaunch): Promise<AgentOutcome> {
  prepareAgentFiles(l);
  const { command, args, env } = agentCommand(l);
  return new Promise((resolve) => {
    let stderr = '';
    let timedOut = false;
    const child = spawn(command, args, {
      cwd: l.workDir,
      env,
      stdio: ['ignore', 'ignore', 'pipe'],
      detached: true,
    });
    const kill = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, l.timeoutMs);
    const onAbort = () => kill();
    l.signal?.addEventListener('abort', onAbort, { once: true });
    child.stderr?.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString('utf8')).slice(-2000);
    });
    let settled = false;
    const done = (exit_code: number | null, signal: string | null) => {
      if (settled) return; // a failed spawn reports both 'error' and 'close'
      settled = true;
      clearTimeout(timer);
      l.signal?.removeEventListener('abort', onAbort);
      resolve({ exit_code, signal, timed_out: timedOut, stderr_tail: stderr.slice(-500) });
    };
    child.on('error', (err) => {
      stderr += `\n${command}: ${err.message}`;
      done(null, null);
    });
    child.on('close', (code, sig) => done(code, sig));
  });
}

/** The absolute path of `name` on `PATH`, or null (what a shell would run; no shell is used). */
export function findExecutable(name: string, path: string | undefined): string | null {
  for (const dir of (path ?? '').split(':')) {
    if (dir === '') continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // not here
    }
  }
  return null;
}
