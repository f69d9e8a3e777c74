import type { TaskSpecInput } from '../../src/contracts/task-spec.js';

/**
 * Task specs for tests. `validSpec()` passes the test master's policy with no findings at all: its
 * executable is allowed (see `TEST_POLICY`), it declares an output and has notes.
 */

/** The executable the test policy allows and `validSpec` runs. */
export const ALLOWED_EXECUTABLE = '/bin/sh';

/** An executable the test policy does not allow. */
export const DISALLOWED_EXECUTABLE = '/usr/bin/curl';

/** The policy section of every test master's config (merge your own over it). */
export const TEST_POLICY = {
  executables: [{ path: ALLOWED_EXECUTABLE }, { path: process.execPath }],
  max_cards: 8,
  max_time_limit_seconds: 3600,
};

/** A spec with no findings under `TEST_POLICY`; `overrides` replace top-level fields. */
export function validSpec(overrides: Partial<TaskSpecInput> = {}): TaskSpecInput {
  return {
    title: 'matmul smoke test',
    objective: 'Show that one card multiplies two matrices correctly.',
    success_criteria: 'result.json exists and says ok',
    cards: { count: 1 },
    runtime: {
      kind: 'process',
      argv: [ALLOWED_EXECUTABLE, '-c', 'echo \'{"ok":true}\' > "$GPU_BROKER_OUTPUT_DIR/result.json"'],
    },
    outputs: [{ path: 'result.json', required: true }],
    time_limit_seconds: 60,
    notes: 'Writes one small JSON file; nothing else.',
    ...overrides,
  };
}

/** `validSpec` with its argv replaced (the rest unchanged). */
export function specRunning(argv: string[], overrides: Partial<TaskSpecInput> = {}): TaskSpecInput {
  return validSpec({ runtime: { kind: 'process', argv }, ...overrides });
}
