import { describe, expect, it } from 'vitest';
import {
  WORKER_CONNECT_PATH,
  WORKER_INPUT_PATH,
  WORKER_INPUT_ROUTE,
  workerInputPath,
} from '../../../src/contracts/paths.js';

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
