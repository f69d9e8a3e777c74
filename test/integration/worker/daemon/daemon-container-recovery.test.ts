import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import { CONTAINER_LABEL, containerName } from '../../../../worker/sandbox/container.js';
import { openLocalStore } from '../../../../worker/store/local-store.js';
import type { TestImage } from '../../../support/container-image.js';
import { testImage } from '../../../support/container-image.js';
import { waitFor } from '../../../support/wait.js';
import { seedExecution } from '../../../support/worker-store.js';
import { type Harness, harness, plan } from './daemon-harness.js';

// A container task's container outlives a worker that crashed (the engine holds it, not the task's
// process group): the restarted worker finds it by its label, removes it, and only then reports the
// cleanup; without an engine it cannot confirm and says so. Real podman throughout.

let image: TestImage;
let h: Harness;
beforeAll(async () => {
  image = await testImage();
}, 60_000);
afterAll(() => image?.cleanup());
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h.dispose();
});

function podman(args: string[]): string {
  return execFileSync(image.setup.command, args, { env: { ...image.setup.env } })
    .toString()
    .trim();
}

function labelled(id: string): string {
  return podman(['ps', '--all', '--filter', `label=${CONTAINER_LABEL}=${id}`, '--format', '{{.Names}}']);
}

/** A container plan whose container a previous worker process left running. */
function leftover(): ExecutionPlan {
  const p = plan({ argv: ['sleep', '600'] });
  const container: ExecutionPlan = {
    ...p,
    spec: { ...p.spec, runtime: { kind: 'container', image: image.pinned, argv: ['sleep', '600'] } },
  };
  const id = container.execution_id;
  podman([
    'run',
    '-d',
    '--name',
    containerName(id),
    '--label',
    `${CONTAINER_LABEL}=${id}`,
    image.tag,
    'sleep',
    '600',
  ]);
  const dataDir = join(h.dir, 'data');
  mkdirSync(dataDir, { recursive: true });
  const store = openLocalStore(join(dataDir, 'worker.sqlite'));
  seedExecution(store, container, 'started');
  store.close();
  return container;
}

describe('worker restart with a container task left running', () => {
  it('removes the container, then reports the execution cleaned', { timeout: 30_000 }, async () => {
    const p = leftover();
    expect(labelled(p.execution_id)).toBe(containerName(p.execution_id));
    await h.worker({ containers: { setup: image.setup, uids: null } });
    await waitFor(() => h.master.phases(p.execution_id).length === 2, {
      timeoutMs: 20_000,
      what: 'the lost execution accounted for',
    });
    const [exited, cleaned] = h.master.phases(p.execution_id);
    expect(exited).toMatchObject({ phase: 'exited', failure_reason: 'WORKER_LOST' });
    expect(cleaned).toMatchObject({ phase: 'cleaned' });
    expect(labelled(p.execution_id)).toBe('');
  });

  it('without an engine, does not confirm the cleanup', { timeout: 30_000 }, async () => {
    const p = leftover();
    try {
      await h.worker();
      await waitFor(() => h.master.phases(p.execution_id).length === 2, {
        timeoutMs: 20_000,
        what: 'the lost execution accounted for',
      });
      const cleanup = h.master.phases(p.execution_id)[1];
      expect(cleanup).toMatchObject({ phase: 'cleanup_failed' });
      expect(cleanup?.detail).toContain('no container engine on this worker');
    } finally {
      podman(['rm', '--force', '--time', '0', containerName(p.execution_id)]);
    }
  });
});
