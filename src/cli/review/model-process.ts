import { spawn } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';

/**
 * How the agent loop starts a model command and reads its answer, sandboxed (model-sandbox.ts) or not
 * (`shellModel`): the prompt on stdin, stdout read up to a cap, stderr dropped, the whole process group
 * killed at the deadline, and no file descriptor of this process reaching the model but its three stdio
 * pipes (and, for bwrap, the pipe its options travel through, which bwrap closes once read).
 */

/** Most bytes of model output read; more is no verdict. */
export const MAX_MODEL_OUTPUT = 1024 * 1024;

/** What one model run gave: its stdout, or null and why it gave none. */
export interface ModelAnswer {
  stdout: string | null;
  reason: string;
}

/** One start of a model process. */
export interface ModelStart {
  /** Absolute path of the program (bwrap, or /bin/sh). */
  readonly file: string;
  readonly args: readonly string[];
  /** Its whole environment. */
  readonly env: Readonly<Record<string, string>>;
  /** Its working directory on this host. */
  readonly cwd: string;
  /** Bytes written to a pipe on fd 3 (bwrap's `--args 3`), then closed. */
  readonly fd3?: Buffer;
  readonly timeoutMs: number;
}

/** O_CLOEXEC as /proc/PID/fdinfo prints a descriptor's flags (octal). */
const O_CLOEXEC = 0o2000000;

/**
 * This process's descriptors above stderr that a child would inherit: those without close-on-exec.
 * Node opens everything close-on-exec (the token file it read, its HTTPS sockets), so these are the ones
 * it was started with, e.g. `gpu-broker review agent --token-file /dev/fd/7 7<token`. Empty where
 * /proc is not there to read.
 */
export function inheritableFds(): number[] {
  let names: string[];
  try {
    names = readdirSync('/proc/self/fd');
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const name of names) {
    const fd = Number(name);
    if (!Number.isInteger(fd) || fd <= 2) continue;
    try {
      const flags = /^flags:\s*([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))?.[1];
      if (flags !== undefined && (Number.parseInt(flags, 8) & O_CLOEXEC) === 0) out.push(fd);
    } catch {
      // Closed meanwhile (the directory listing's own descriptor among them).
    }
  }
  return out.sort((a, b) => a - b);
}

type StdioEntry = 'pipe' | 'ignore' | number;

/**
 * The child's stdio: stdin and stdout piped, stderr dropped, fd 3 piped when `fd3` is given, and every
 * inheritable descriptor of this process (inheritableFds) replaced by /dev/null at the same number, as
 * Node passes the others over untouched.
 */
function childStdio(withFd3: boolean, devNull: number): StdioEntry[] {
  const leaky = inheritableFds();
  const stdio: StdioEntry[] = ['pipe', 'pipe', 'ignore'];
  const top = Math.max(withFd3 ? 3 : 2, ...leaky);
  for (let fd = 3; fd <= top; fd++)
    stdio.push(fd === 3 && withFd3 ? 'pipe' : leaky.includes(fd) ? devNull : 'ignore');
  return stdio;
}

/** Runs one model process to its end, the deadline, or the output cap; never throws. */
export function runModelProcess(start: ModelStart, prompt: string): Promise<ModelAnswer> {
  return new Promise((resolve) => {
    const devNull = openSync('/dev/null', 'r');
    const child = spawn(start.file, [...start.args], {
      env: { ...start.env },
      cwd: start.cwd,
      detached: true,
      stdio: childStdio(start.fd3 !== undefined, devNull),
    });
    closeSync(devNull);
    const chunks: Buffer[] = [];
    let size = 0;
    let failed: string | null = null;
    const kill = (why: string) => {
      failed ??= why;
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    };
    const timer = setTimeout(() => kill(`timed out after ${start.timeoutMs} ms`), start.timeoutMs);
    child.stdout?.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_MODEL_OUTPUT) kill(`output over ${MAX_MODEL_OUTPUT} bytes`);
      else chunks.push(c);
    });
    const options = child.stdio[3];
    if (start.fd3 !== undefined && options && 'end' in options) {
      options.on('error', () => undefined);
      options.end(start.fd3);
    }
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(prompt);
    child.on('error', (err) => kill(`could not start: ${err.message}`));
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (failed === null && code !== 0) failed = `exited with ${code ?? signal}`;
      resolve(
        failed === null
          ? { stdout: Buffer.concat(chunks).toString('utf8'), reason: '' }
          : { stdout: null, reason: failed },
      );
    });
  });
}
