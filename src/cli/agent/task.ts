import { BrokerError } from '../../contracts/errors.js';
import type { TaskSummary, TaskView } from '../../contracts/views.js';
import type { FlagValues } from '../../platform/args.js';
import { parseCommand, usageError } from '../common/args.js';
import type { CliIo, CommandRunner } from '../common/io.js';
import { type MasterClient, withMaster } from '../common/master-client.js';
import { emit, escapeField, reportError, table } from '../common/output.js';
import { TASK } from './task-command-specs.js';
import {
  endLine,
  followTask,
  LogReader,
  type LogStream,
  RUN_EXIT,
  stateLine,
  TERMINAL_TASK_STATES,
  taskExitCode,
} from './task-follow.js';
import { downloadOutputs, listOutputs } from './task-outputs.js';

/**
 * `gpu-broker task list|show|logs|wait|outputs|cancel` (ADR 0026): following a task after `run` was
 * interrupted, or any task one may see. `logs --follow` reads by byte offset (task-follow.ts), so no
 * line is printed twice or skipped; `wait` exits with the code `run` would have.
 */

type TaskFlags = FlagValues<typeof TASK.flags>;

/** Per subcommand: whether it takes a task id. */
const TAKES_ID: Readonly<Record<string, boolean>> = {
  list: false,
  show: true,
  logs: true,
  wait: true,
  outputs: true,
  cancel: true,
};

const taskPath = (id: string) => `/api/v1/tasks/${encodeURIComponent(id)}`;

/** `task list`: newest first. */
async function list(c: MasterClient, io: CliIo, v: TaskFlags): Promise<number> {
  const q = new URLSearchParams();
  if (v.state) q.set('state', v.state);
  q.set('limit', v.limit ?? '50');
  const r = await c.get<{ tasks: TaskSummary[]; next_cursor: string | null }>(`/api/v1/tasks?${q}`);
  emit(io, v.json, r, () =>
    r.tasks.length === 0
      ? 'no tasks'
      : table(
          ['TASK', 'STATE', 'FAILURE', 'POS', 'UPDATED', 'TITLE'],
          r.tasks.map((t) => [t.task_id, t.state, t.failure_reason, t.position, t.updated_at, t.title]),
        ),
  );
  return 0;
}

/** `task show`: one task in a few lines. */
async function show(c: MasterClient, io: CliIo, v: TaskFlags, id: string): Promise<number> {
  const { task: t } = await c.get<{ task: TaskView }>(taskPath(id));
  emit(io, v.json, { task: t }, () =>
    [
      TERMINAL_TASK_STATES.has(t.state) ? endLine(t) : stateLine(t),
      `title:    ${escapeField(t.title)}`,
      `proposal: ${t.proposal_id} revision ${t.revision_id}`,
      `created ${t.created_at}, started ${t.started_at ?? '-'}, finished ${t.finished_at ?? '-'}`,
      `next:     ${escapeField(t.next_action)}`,
    ].join('\n'),
  );
  return 0;
}

/** `task logs`: everything so far (or the last --tail lines), and with --follow until the task ends. */
async function logs(c: MasterClient, io: CliIo, v: TaskFlags, id: string): Promise<number> {
  if (v.stream && v.stream !== 'stdout' && v.stream !== 'stderr')
    throw new BrokerError('INVALID_INPUT', '--stream is stdout or stderr', 'Omit it for both.');
  const streams: LogStream[] = v.stream ? [v.stream as LogStream] : ['stdout', 'stderr'];
  const reader = new LogReader(c, id, { stdout: io.stdout, stderr: io.stderr }, streams);
  if (v.tail !== undefined) {
    if (!/^[1-9]\d{0,4}$/.test(v.tail))
      throw new BrokerError(
        'INVALID_INPUT',
        '--tail is a number of lines from 1 to 10000',
        'e.g. --tail 100',
      );
    for (const s of streams) {
      const p = await c.get<{ data: string; next_offset: number }>(
        `${taskPath(id)}/logs?stream=${s}&tail_lines=${v.tail}&max_bytes=1048576`,
      );
      (s === 'stdout' ? io.stdout : io.stderr)(p.data);
      reader.offsets[s] = p.next_offset;
    }
  }
  if (!v.follow) {
    if (v.tail === undefined) await reader.pump();
    return 0;
  }
  const end = await followTask(c, id, { logs: reader, stop: io.stopSignal });
  return end === 'interrupted' ? RUN_EXIT.INTERRUPTED : 0;
}

/** `task wait`: until the task ends; exits as `gpu-broker run` would (RUN_EXIT). */
async function wait(c: MasterClient, io: CliIo, v: TaskFlags, id: string): Promise<number> {
  const end = await followTask(c, id, {
    stop: io.stopSignal,
    onState: (line) => io.stderr(`gpu-broker: ${line}\n`),
  });
  if (end === 'interrupted') return RUN_EXIT.INTERRUPTED;
  emit(io, v.json, { task: end.task, exit: taskExitCode(end.task) }, () => endLine(end.task));
  return taskExitCode(end.task);
}

/** `task outputs`: the listing, or with --dir the files downloaded and checked. */
async function outputs(c: MasterClient, io: CliIo, v: TaskFlags, id: string): Promise<number> {
  if (v.dir) {
    const got = await downloadOutputs(c, id, v.dir);
    emit(io, v.json, got, () =>
      got.files.length === 0 ? 'no outputs' : `${got.files.length} file(s) in ${got.root} (sha256 checked)`,
    );
    return 0;
  }
  const l = await listOutputs(c, id);
  emit(io, v.json, { outputs: l.outputs, outputs_pruned_at: l.outputs_pruned_at }, () =>
    l.outputs.length === 0
      ? 'no outputs'
      : table(
          ['PATH', 'SIZE', 'SHA256'],
          l.outputs.map((o) => [o.path, o.size, o.sha256]),
        ),
  );
  return 0;
}

/** `task cancel`. */
async function cancel(c: MasterClient, io: CliIo, v: TaskFlags, id: string): Promise<number> {
  const { task: t } = await c.post<{ task: TaskView }>(`${taskPath(id)}/cancel`, {});
  emit(io, v.json, { task: t }, () => `${stateLine(t)}: ${escapeField(t.next_action)}`);
  return 0;
}

const SUBCOMMANDS = { show, logs, wait, outputs, cancel } as const;

/** `gpu-broker task …`: see the module comment. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(TASK, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const [sub = '', ...rest] = parsed.positionals;
  if (!(sub in TAKES_ID))
    return usageError(
      io,
      TASK,
      sub ? `unknown subcommand "${sub}"` : 'which subcommand: list, show, logs, wait, outputs or cancel?',
    );
  const wanted = TAKES_ID[sub] ? 1 : 0;
  if (rest.length > wanted) return usageError(io, TASK, `unexpected "${rest[wanted]}"`);
  const id = rest[0];
  if (wanted === 1 && !id) return usageError(io, TASK, 'which task?');
  const abort = new AbortController();
  void io.stopSignal?.then(() => abort.abort());
  try {
    return await withMaster(
      values,
      io,
      (c) =>
        sub === 'list'
          ? list(c, io, values)
          : SUBCOMMANDS[sub as keyof typeof SUBCOMMANDS](c, io, values, id ?? ''),
      abort.signal,
    );
  } catch (err) {
    if (abort.signal.aborted) return RUN_EXIT.INTERRUPTED;
    return reportError(io, values.json, err);
  }
};
