/**
 * The messages between the worker (spawner.ts) and the Node spawner program (spawner-program.ts) over
 * its IPC channel (JSON serialisation). The native spawner speaks frames instead (spawner.ts spawnFrame).
 */

/** The worker asks: start this process (the fields of a LaunchRequest), or write fd 4's bytes once. */
export type ToSpawner =
  | {
      t: 'spawn';
      id: number;
      command: string;
      argv0?: string;
      args: readonly string[];
      env: Readonly<Record<string, string>>;
      cwd: string;
      /** What each of fds 0… is: a pipe back to the worker, or nothing. */
      stdio: ReadonlyArray<'pipe' | 'ignore'>;
      fileAt?: { fd: number; path: string };
      uid?: number;
      gid?: number;
    }
  | { t: 'input'; id: number; data: string };

/** The spawner answers: started (then one `fd` per pipe, its handle attached), could not, or exited. */
export type FromSpawner =
  | { t: 'spawned'; id: number; pid: number }
  | { t: 'fd'; id: number; fd: number }
  | { t: 'error'; id: number; message: string }
  | { t: 'exit'; id: number; code: number | null; signal: NodeJS.Signals | null };
