/**
 * Final records of jobs slurmctld has forgotten: the `jobcomp/filetxt` log, and `scontrol show config`
 * (which says whether that log or accounting exists). Pure parsing plus one bounded file read.
 */
import { open } from 'node:fs/promises';
import { expandHostlist } from './hostlist.js';
import { field, nullable, parseExitCode, parseFields, parseJobState, parseSlurmTime } from './parse.js';
import type { SlurmEndedJob } from './types.js';

/** `scontrol show config` lines `Key = value` to a map. */
export function parseConfig(out: string): Map<string, string> {
  const m = new Map<string, string>();
  for (const line of out.split('\n')) {
    const i = line.indexOf('=');
    if (i < 0) continue;
    const k = line.slice(0, i).trim();
    if (/^[A-Za-z][A-Za-z0-9_]*$/.test(k)) m.set(k, line.slice(i + 1).trim());
  }
  return m;
}

/** Finds `JobId=<id> ` in the last 64 MiB of a jobcomp/filetxt log; null when absent. */
export async function findJobcompRecord(path: string, id: string): Promise<SlurmEndedJob | null> {
  const fh = await open(path, 'r');
  try {
    const { size } = await fh.stat();
    const len = Math.min(size, 64 * 1024 * 1024);
    const buf = Buffer.alloc(len);
    await fh.read(buf, 0, len, size - len);
    const text = buf.toString('utf8');
    const prefix = `JobId=${id} `;
    const found = text
      .split('\n')
      .filter((l) => l.startsWith(prefix))
      .pop();
    return found === undefined ? null : parseJobcompLine(found);
  } finally {
    await fh.close();
  }
}

/** One jobcomp/filetxt record (`JobId=… Name=… JobState=… NodeList=… ExitCode=…`). */
export function parseJobcompLine(line: string): SlurmEndedJob {
  const f = parseFields(line);
  const rawState = field(f, 'JobState') ?? '';
  const ec = parseExitCode(field(f, 'ExitCode'));
  return {
    id: field(f, 'JobId') ?? '',
    name: field(f, 'Name') ?? '',
    state: parseJobState(rawState),
    rawState,
    exitCode: ec?.code ?? null,
    signal: ec?.signal ?? null,
    nodes: safeExpand(nullable(field(f, 'NodeList')) ?? ''),
    startTime: parseSlurmTime(field(f, 'StartTime')),
    endTime: parseSlurmTime(field(f, 'EndTime')),
  };
}

/** Expands a hostlist, [] when it does not parse (a final record must not fail on a node name). */
export function safeExpand(expr: string): string[] {
  try {
    return expandHostlist(expr);
  } catch {
    return [];
  }
}
