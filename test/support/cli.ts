import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CliIo, CommandRunner } from '../../src/cli/common/io.js';
import type { MasterConfigInput } from '../../src/platform/config.js';
import { packageRoot } from '../../src/platform/package-root.js';
import { TEST_POLICY } from './spec.js';

/**
 * Running the CLI in tests: in-process through a command's exported `run(argv, io)` with captured
 * output, or as the built program (`node dist/src/cli/main.js`, made by `npm run build`).
 */

/** What an in-process command printed and returned. */
export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON (for `--json`); throws if it is not JSON. */
  json<T = Record<string, unknown>>(): T;
}

/** Runs a command's `run` in-process with captured stdout/stderr and the given environment. */
export async function runCli(
  run: CommandRunner,
  argv: string[],
  env: Record<string, string | undefined> = {},
  stopSignal?: Promise<void>,
): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const io: CliIo = {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
    env,
    ...(stopSignal ? { stopSignal } : {}),
  };
  const code = await run(argv, io);
  return {
    code,
    stdout,
    stderr,
    json<T>() {
      try {
        return JSON.parse(stdout) as T;
      } catch {
        throw new Error(`stdout is not JSON (exit ${code}): ${stdout}\nstderr: ${stderr}`);
      }
    },
  };
}

/** Path of the built CLI; throws a clear error when `npm run build` has not been run. */
export function builtCliPath(): string {
  const path = join(packageRoot(), 'dist', 'src', 'cli', 'main.js');
  if (!existsSync(path)) throw new Error(`${path} is missing: run \`npm run build\` before these tests`);
  return path;
}

/** Result of running the built CLI to completion. */
export interface SpawnResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs `node dist/src/cli/main.js …args` to completion (bounded by `timeoutMs`, default 30 s). */
export function spawnCli(
  args: string[],
  opts: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<SpawnResult> {
  const child = spawn(process.execPath, [builtCliPath(), ...args], {
    env: { ...process.env, ...(opts.env ?? {}) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    stdout += d;
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`gpu-broker ${args.join(' ')} did not exit within ${opts.timeoutMs ?? 30_000} ms`));
    }, opts.timeoutMs ?? 30_000);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** A master running as a child process (`gpu-broker serve --json`). */
export interface ChildMaster {
  url: string;
  caFile: string | null;
  operatorTokenFile: string;
  child: ChildProcess;
  /** Everything the child wrote to stderr so far (its logs). */
  stderr(): string;
  /** Sends a signal and resolves when the process has exited. */
  stop(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Writes a master config file into `dir` (the test policy, i.e. `TEST_POLICY`, under `input`) and
 * returns its path, for `serve --config`.
 */
export function writeConfigFile(dir: string, input: MasterConfigInput = {}): string {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, 'test-config.json');
  writeFileSync(path, JSON.stringify({ ...input, policy: { ...TEST_POLICY, ...(input.policy ?? {}) } }));
  return path;
}

/**
 * Spawns `node dist/src/cli/main.js serve --data-dir DIR --listen 127.0.0.1:0 --json --config F …extraArgs`
 * and resolves once it printed its URL (bounded by `timeoutMs`, default 30 s). The config file holds the
 * test policy merged with `opts.config` (null: no --config at all, the product defaults).
 */
export function spawnMaster(
  dataDir: string,
  extraArgs: string[] = [],
  opts: {
    timeoutMs?: number;
    listen?: string;
    config?: MasterConfigInput | null;
    /** `serve` (default) or `start` (master + local worker, same flags and --json line). */
    command?: 'serve' | 'start';
    /** Environment added to this process's. */
    env?: Record<string, string>;
  } = {},
): Promise<ChildMaster> {
  const configArgs = opts.config === null ? [] : ['--config', writeConfigFile(dataDir, opts.config)];
  const child = spawn(
    process.execPath,
    [
      builtCliPath(),
      opts.command ?? 'serve',
      '--data-dir',
      dataDir,
      '--listen',
      opts.listen ?? '127.0.0.1:0',
      '--json',
      ...configArgs,
      ...extraArgs,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...(opts.env ?? {}) } },
  );
  let out = '';
  let err = '';
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`serve did not print its URL within ${opts.timeoutMs ?? 30_000} ms; stderr: ${err}`));
    }, opts.timeoutMs ?? 30_000);
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`serve exited early (code ${code}, signal ${signal}); stdout: ${out} stderr: ${err}`));
    });
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const line = out
        .split('\n')
        .slice(0, -1)
        .find((l) => l.trim().startsWith('{'));
      if (!line) return;
      clearTimeout(timer);
      const info = JSON.parse(line) as { url: string; ca_file: string | null; operator_token_file: string };
      resolve({
        url: info.url,
        caFile: info.ca_file,
        operatorTokenFile: info.operator_token_file,
        child,
        stderr: () => err,
        async stop(signal = 'SIGTERM') {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
          return exited;
        },
      });
    });
  });
}
