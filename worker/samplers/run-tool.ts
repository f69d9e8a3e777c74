import { type ExecFileException, execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { delimiter, isAbsolute, join } from 'node:path';
import { SamplerError } from './card-sampler.js';

/** Environment variables as a sampler sees them (`process.env` by default; tests pass their own). */
export type ToolEnv = Readonly<Record<string, string | undefined>>;

/** How to run a GPU tool. */
export interface ToolRunOptions {
  /** Kill the tool (SIGKILL) after this long; a stuck driver call must not stall sampling. */
  timeoutMs: number;
  /** Cap on stdout and on stderr; beyond it the tool is killed and the run fails. */
  maxBufferBytes: number;
  /** Environment of the child. */
  env: ToolEnv;
}

/** Defaults used by every sampler unless overridden. */
export const DEFAULT_TOOL_RUN = { timeoutMs: 10_000, maxBufferBytes: 4 * 1024 * 1024 } as const;

/** How one run ended when the tool did run to the end (zero or non-zero exit). */
export interface ToolResult {
  /** Exit code; null when a signal ended it. */
  exitCode: number | null;
  /** Signal that ended it, if any. */
  signal: string | null;
  stdout: string;
  stderr: string;
}

/** Extra time after the timeout before giving up on the child's pipes closing (grandchildren may hold them). */
const CLOSE_GRACE_MS = 2_000;
/** How much of a tool's output goes into an error message. */
const OUTPUT_EXCERPT_CHARS = 600;

/** The first few hundred characters of what a tool printed, on one line, for error messages. */
export function excerpt(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > OUTPUT_EXCERPT_CHARS ? `${flat.slice(0, OUTPUT_EXCERPT_CHARS)}…` : flat;
}

/**
 * Runs `file args` without a shell. Resolves with the result whenever the tool exits (also non-zero:
 * some callers read a refusal from it); rejects with a `SamplerError` when it cannot start, runs past
 * `timeoutMs`, or prints more than `maxBufferBytes`.
 */
export function runTool(file: string, args: readonly string[], options: ToolRunOptions): Promise<ToolResult> {
  return new Promise<ToolResult>((resolve, reject) => {
    let settled = false;
    const settle = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(backstop);
      fn();
    };
    const child = execFile(
      file,
      [...args],
      {
        encoding: 'utf8',
        timeout: options.timeoutMs,
        killSignal: 'SIGKILL',
        maxBuffer: options.maxBufferBytes,
        env: { ...options.env },
        windowsHide: true,
      },
      (error, stdout, stderr) => {
        const outcome = toolOutcome(file, options, error, stdout, stderr);
        settle(() => (outcome instanceof SamplerError ? reject(outcome) : resolve(outcome)));
      },
    );
    // execFile reports only once the pipes close; a grandchild holding them open would keep us waiting.
    const backstop = setTimeout(() => {
      child.kill('SIGKILL');
      settle(() => reject(timedOut(file, options)));
    }, options.timeoutMs + CLOSE_GRACE_MS);
  });
}

/**
 * How a run that execFile reported ended: the result when the tool exited (zero, non-zero or by a
 * signal), else the `SamplerError` that says why there is none.
 */
function toolOutcome(
  file: string,
  options: ToolRunOptions,
  error: ExecFileException | null,
  stdout: string,
  stderr: string,
): ToolResult | SamplerError {
  if (!error) return { exitCode: 0, signal: null, stdout, stderr };
  const code: unknown = (error as { code?: unknown }).code;
  const killed = (error as { killed?: boolean }).killed === true;
  const signal = (error as { signal?: string | null }).signal ?? null;
  if (code === 'ENOENT' || code === 'EACCES' || code === 'ENOTDIR')
    return new SamplerError('TOOL_NOT_FOUND', `${file} cannot be run (${String(code)})`, {
      tool: file,
      exitCode: null,
    });
  if (code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER')
    return new SamplerError('OUTPUT_TOO_LARGE', `${file} printed more than ${options.maxBufferBytes} bytes`, {
      tool: file,
      exitCode: null,
    });
  if (killed && signal === 'SIGKILL') return timedOut(file, options);
  if (typeof code === 'number' || signal !== null)
    return { exitCode: typeof code === 'number' ? code : null, signal, stdout, stderr };
  return new SamplerError('TOOL_FAILED', `${file} could not be run: ${error.message}`, {
    tool: file,
    exitCode: null,
  });
}

function timedOut(file: string, options: ToolRunOptions): SamplerError {
  return new SamplerError(
    'TOOL_TIMED_OUT',
    `${file} did not answer within ${options.timeoutMs} ms and was killed`,
    {
      tool: file,
      exitCode: null,
      signal: 'SIGKILL',
    },
  );
}

/** The `TOOL_FAILED` error for a run that exited non-zero, quoting what the tool said. */
export function toolFailure(file: string, result: ToolResult): SamplerError {
  const how =
    result.exitCode === null ? `was killed by ${result.signal ?? 'a signal'}` : `exited ${result.exitCode}`;
  const said = excerpt(`${result.stderr} ${result.stdout}`);
  return new SamplerError('TOOL_FAILED', `${file} ${how}${said ? `: ${said}` : ''}`, {
    tool: file,
    exitCode: result.exitCode,
    signal: result.signal,
    output: said,
  });
}

/** Returns stdout of a run that exited 0, or throws `TOOL_FAILED` quoting what the tool said. */
export function requireSuccess(file: string, result: ToolResult): string {
  if (result.exitCode === 0) return result.stdout;
  throw toolFailure(file, result);
}

/**
 * Where `name` would be run from: itself when it contains a slash, else the first executable file of
 * that name on `env.PATH`. Null when there is none, so `auto` can say "no nvidia-smi found".
 */
export async function findExecutable(name: string, env: ToolEnv): Promise<string | null> {
  const candidates = name.includes('/')
    ? [name]
    : (env['PATH'] ?? '')
        .split(delimiter)
        .filter((dir) => dir !== '' && isAbsolute(dir))
        .map((dir) => join(dir, name));
  for (const candidate of candidates) {
    try {
      await access(candidate, constants.X_OK);
      if ((await stat(candidate)).isFile()) return candidate;
    } catch {
      // Not here; try the next PATH entry.
    }
  }
  return null;
}

/**
 * The path to run for tool `name`: `override` when given, else `name` on `env.PATH`. Throws
 * `TOOL_NOT_FOUND` with a message that says which of the two was tried.
 */
export async function locateTool(name: string, override: string | undefined, env: ToolEnv): Promise<string> {
  const found = await findExecutable(override ?? name, env);
  if (found) return found;
  const where = override ? `at ${override}` : 'on PATH';
  throw new SamplerError('TOOL_NOT_FOUND', `${name} not found ${where}`, {
    tool: override ?? name,
    exitCode: null,
  });
}
