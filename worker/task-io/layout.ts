import { chown, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { InputFile } from '../../src/contracts/task-spec.js';
import type { TaskDirs } from './env.js';

/**
 * The layout of one execution's directory, the same whichever executor runs the task (the local one,
 * local/setup.ts, or the Slurm one, slurm/job-setup.ts, whose directory sits on the shared job dir):
 *
 *   <execRoot>/            the worker's
 *     inputs/              the spec's inputs when sandboxed (bound read-only at /task/<entry>)
 *     task/                the task's dir (`/task` in a sandbox), owned by the task's uid
 *       out/               $GPU_BROKER_OUTPUT_DIR
 *       tmp/               TMPDIR when unsandboxed (a sandbox has a private /tmp)
 *
 * Unsandboxed, the inputs are placed straight into `task/`.
 */

/** Where the task's execution dir appears inside a sandbox. */
export const SANDBOX_TASK_DIR = '/task';

/** One execution's directories on the host, and as the task sees them. */
export interface TaskLayout {
  /** The task's dir on the host (`<execRoot>/task`). */
  readonly taskDir: string;
  /** Where the inputs are placed on the host: `<execRoot>/inputs` in a sandbox, else the task dir. */
  readonly inputsDir: string;
  /** The task's dirs as the task sees them (its env). */
  readonly dirs: TaskDirs;
  readonly sandboxed: boolean;
}

/** The layout of the execution rooted at `execRoot`; pure. */
export function taskLayout(execRoot: string, sandboxed: boolean): TaskLayout {
  const taskDir = join(execRoot, 'task');
  return {
    taskDir,
    inputsDir: sandboxed ? join(execRoot, 'inputs') : taskDir,
    dirs: sandboxed
      ? { execDir: SANDBOX_TASK_DIR, outputDir: `${SANDBOX_TASK_DIR}/out`, tmpDir: '/tmp' }
      : { execDir: taskDir, outputDir: join(taskDir, 'out'), tmpDir: join(taskDir, 'tmp') },
    sandboxed,
  };
}

/**
 * Makes the task's dir, `out/` and (unsandboxed) `tmp/`, each 0700, and gives them to `owner` when
 * given. Not recursive for the task dir: an existing one means this execution already ran here, and a
 * run must start from a fresh directory, never from a previous attempt's files.
 */
export async function makeTaskDirs(
  layout: TaskLayout,
  owner: { readonly uid: number; readonly gid: number } | null,
): Promise<void> {
  for (const dir of taskDirsOf(layout)) await mkdir(dir, { mode: 0o700 });
  if (owner !== null) await giveTaskDirs(layout, owner);
}

/**
 * Gives the task's dirs (made by makeTaskDirs) to `owner`. An unsandboxed task's inputs are placed in its
 * own dir, so a local worker gives it away only after they are placed: until then no other process of
 * that uid (every unsandboxed task shares it) can plant a link for root's writes to follow.
 */
export async function giveTaskDirs(
  layout: TaskLayout,
  owner: { readonly uid: number; readonly gid: number },
): Promise<void> {
  for (const dir of taskDirsOf(layout)) await chown(dir, owner.uid, owner.gid);
}

function taskDirsOf(layout: TaskLayout): string[] {
  const dirs = [layout.taskDir, join(layout.taskDir, 'out')];
  if (!layout.sandboxed) dirs.push(join(layout.taskDir, 'tmp'));
  return dirs;
}

/** The top-level names of the spec's inputs, sorted: a sandbox binds each read-only at /task/<entry>. */
export function inputEntries(inputs: readonly InputFile[]): string[] {
  return [...new Set(inputs.map((i) => i.path.split('/')[0]!))].sort();
}
