import { readFileSync } from 'node:fs';

/**
 * The unprivileged account tasks run as (`gpu-broker worker --run-as USER`). A worker started as root
 * can give each task another uid, so a task cannot read the worker's token, its SQLite file or the
 * master's data dir on the same host; without it a task runs as the worker's own user.
 */
export interface RunAs {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
}

/**
 * Resolves `USER` (a name in /etc/passwd) or `UID:GID` to ids. Throws a clear error for an unknown user,
 * for root (which would defeat the point), or when this process is not root (it could not switch).
 */
export function resolveRunAs(spec: string, opts: { passwdPath?: string; currentUid?: number } = {}): RunAs {
  const currentUid = opts.currentUid ?? process.getuid?.() ?? -1;
  if (currentUid !== 0)
    throw new Error(`--run-as ${spec} needs the worker to run as root (it runs as uid ${currentUid})`);
  let runAs: RunAs | undefined;
  const numeric = /^(\d+):(\d+)$/.exec(spec);
  if (numeric) runAs = { name: spec, uid: Number(numeric[1]), gid: Number(numeric[2]) };
  else {
    const passwd = readFileSync(opts.passwdPath ?? '/etc/passwd', 'utf8');
    for (const line of passwd.split('\n')) {
      const [name, , uid, gid] = line.split(':');
      if (name === spec && uid !== undefined && gid !== undefined)
        runAs = { name, uid: Number(uid), gid: Number(gid) };
    }
  }
  if (!runAs || !Number.isInteger(runAs.uid) || !Number.isInteger(runAs.gid))
    throw new Error(`--run-as: no user ${JSON.stringify(spec)} in /etc/passwd (or give UID:GID)`);
  if (runAs.uid === 0) throw new Error('--run-as must name an unprivileged user, not root');
  return runAs;
}
