import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../../support/wait.js';
import { type Harness, harness, plan } from './daemon-harness.js';

/** The daemon prunes a finished execution's directory once the master acknowledged everything about it. */

let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h.dispose();
});

describe('worker execution-directory retention', () => {
  it('deletes a finished execution directory after its cleanup receipt is acknowledged', async () => {
    await h.worker({ executionRetention: { keep_count: 0, keep_seconds: 0 }, executionPruneIntervalMs: 50 });
    await waitFor(() => h.master.connected());
    const p = plan({ argv: ['/bin/sh', '-c', 'echo hi'] });
    h.master.assign(p);
    const dir = join(h.dir, 'data', 'executions', p.execution_id);
    await waitFor(() => h.master.phases(p.execution_id).some((m) => m.phase === 'cleaned'), {
      what: 'cleaned',
    });
    expect(h.master.logText(p.execution_id)).toBe('hi\n');
    await waitFor(() => !existsSync(dir), { what: 'execution directory deleted' });
  });
});
