import { describe, expect, it } from 'vitest';
import {
  WORKER_CONNECT_PATH,
  WORKER_INPUT_PATH,
  WORKER_INPUT_ROUTE,
  workerInputPath,
} from '../../../src/contracts/paths.js';
import { utf8Length } from '../../../src/contracts/task-spec.js';

/**
 * The worker link's paths (src/contracts/paths.ts): what a worker requests is what the master routes
 * and lets a worker token through on.
 */

const SHA = 'ab'.repeat(32);

describe('worker link paths', () => {
  it('builds input paths the master lets a worker token fetch', () => {
    expect(workerInputPath('exec_01J', SHA)).toBe(`/api/v1/executions/exec_01J/inputs/${SHA}`);
    expect(WORKER_INPUT_PATH.test(workerInputPath('exec_01J', SHA))).toBe(true);
    expect(WORKER_INPUT_PATH.test(workerInputPath('a/b', SHA))).toBe(true);
  });

  it('matches the route the master registers, and nothing else a worker token could reach', () => {
    const route = WORKER_INPUT_ROUTE.replace(':execution_id', 'e1').replace(':sha256', SHA);
    expect(WORKER_INPUT_PATH.test(route)).toBe(true);
    expect(WORKER_INPUT_PATH.test(`/api/v1/executions/e1/inputs/${SHA}/x`)).toBe(false);
    expect(WORKER_INPUT_PATH.test('/api/v1/executions/e1/inputs/not-a-digest')).toBe(false);
    expect(WORKER_INPUT_PATH.test(WORKER_CONNECT_PATH)).toBe(false);
  });
});

describe('utf8Length', () => {
  it('counts as TextEncoder encodes: ASCII, 2-, 3- and 4-byte characters, lone surrogates as U+FFFD', () => {
    const samples = [
      '',
      'a/b.py',
      'é',
      '中文/文件.py',
      '😀x',
      '\ud800',
      'a\udc00b',
      '\ud83d\ude00\ud83d',
      'ÿ'.repeat(300),
    ];
    for (let i = 0; i < 200; i++)
      samples.push(
        Array.from({ length: 1 + (i % 17) }, (_, k) =>
          String.fromCharCode((i * 7919 + k * 104729) % 0x10000),
        ).join(''),
      );
    for (const s of samples)
      expect(utf8Length(s), JSON.stringify(s)).toBe(new TextEncoder().encode(s).length);
  });
});
