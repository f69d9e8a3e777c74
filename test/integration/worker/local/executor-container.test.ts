import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migCardIndex } from '../../../../src/contracts/sample.js';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import type { ExecutionHandle } from '../../../../worker/executions/executor.js';
import { startExecution } from '../../../../worker/local/executor.js';
import type { ContainerTasks } from '../../../../worker/sandbox/container.js';
import { CONTAINER_LABEL, containerArgs, containerName } from '../../../../worker/sandbox/container.js';
import { makeSimDeviceNodes } from '../../../../worker/sandbox/devices.js';
import { TaskUidPool } from '../../../../worker/sandbox/task-uids.js';
import type { TestImage } from '../../../support/container-image.js';
import { testImage } from '../../../support/container-image.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, text } from '../../../support/executor-plan.js';
import { waitFor } from '../../../support/wait.js';

// Container tasks through the executor with this machine's real podman and runc, on an image built
// locally from busybox (test/support/container-image.ts). Nothing is mocked.

let image: TestImage;
let dataDir: string;
let containers: ContainerTasks;
const FIRST_UID = 2_000_200_000;

beforeAll(async () => {
  image = await testImage();
  dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-container-'));
  const root = process.getuid?.() === 0;
  containers = {
    setup: image.setup,
    uids: root ? new TaskUidPool({ first: FIRST_UID, last: FIRST_UID + 99 }) : null,
    // With the capability stand-ins of two simulated MIG slices of card 0 (GI 1 and GI 2).
    simNodes: await makeSimDeviceNodes(join(dataDir, 'devices'), 8, root, [12, 13, 21, 22]),
  };
}, 60_000);
afterAll(() => {
  image?.cleanup();
  rmSync(dataDir, { recursive: true, force: true });
});

function start(plan: ExecutionPlan) {
  const chunks: Chunk[] = [];
  const handle: ExecutionHandle = startExecution(plan, {
    rootDir: join(dataDir, 'executions'),
    workerId: 'worker-1',
    provider: 'sim',
    onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
    cleanupPollMs: 50,
    containers,
  });
  return { handle, chunks };
}

/** Containers carrying the execution's label, as podman lists them (running or not). */
function labelled(executionId: string): string {
  return execFileSync(
    image.setup.command,
    ['ps', '--all', '--filter', `label=${CONTAINER_LABEL}=${executionId}`, '--format', '{{.Names}}'],
    { env: { ...image.setup.env } },
  )
    .toString()
    .trim();
}

describe('a container task', () => {
  it('on a MIG slice sees its card and its two capability nodes only, named by its MIG- uuid (ADR 0046)', async () => {
    const open = (m: number) =>
      `(exec 3</dev/nvidia-caps/nvidia-cap${m} && echo "cap${m} opened") 2>/dev/null || echo "cap${m} ENOENT"`;
    const plan = makePlan({
      image: image.pinned,
      argv: [
        'sh',
        '-c',
        `ls /dev | grep ^nvidia; ls /dev/nvidia-caps; echo "vis=$CUDA_VISIBLE_DEVICES nv=$NVIDIA_VISIBLE_DEVICES ids=$GPU_BROKER_GPU_IDS"; ${[12, 13, 21, 22].map(open).join('; ')}`,
      ],
      cards: [{ index: migCardIndex(0, 1, 0), uuid: 'MIG-SIM-a' }],
    });
    const { handle, chunks } = start(plan);
    const result = await handle.done;
    expect(result.setup_error).toBeUndefined();
    expect(result.failure_reason).toBeNull();
    expect(text(chunks, 'stdout').trim().split('\n')).toEqual([
      'nvidia-caps',
      'nvidia0',
      'nvidia-cap12',
      'nvidia-cap13',
      'vis=MIG-SIM-a nv=MIG-SIM-a ids=0:mig:1/0',
      'cap12 opened',
      'cap13 opened',
      'cap21 ENOENT',
      'cap22 ENOENT',
    ]);
  });

  it('runs pinned by digest, writes an output that comes back, sees its env and only its cards', async () => {
    const plan = makePlan({
      image: image.pinned,
      argv: [
        'sh',
        '-c',
        'ls /dev; echo "vis=$CUDA_VISIBLE_DEVICES ids=$GPU_BROKER_GPU_IDS out=$GPU_BROKER_OUTPUT_DIR pwd=$(pwd)"; echo "$MULTI"; echo result > "$GPU_BROKER_OUTPUT_DIR/r.txt"',
      ],
      env: { MULTI: 'one\ntwo' },
      cards: [
        { index: 2, uuid: 'SIM-2' },
        { index: 5, uuid: 'SIM-5' },
      ],
      outputs: [{ path: 'r.txt', required: true }],
    });
    const { handle, chunks } = start(plan);
    const result = await handle.done;
    expect(result.setup_error).toBeUndefined();
    expect(result.failure_reason).toBeNull();
    expect(result.exit_code).toBe(0);
    const out = text(chunks, 'stdout');
    expect(out.split('\n').filter((l) => l.startsWith('nvidia'))).toEqual(['nvidia2', 'nvidia5']);
    expect(out).toContain('vis=0,1 ids=2,5 out=/task/out pwd=/task');
    expect(out).toContain('one\ntwo');
    expect(result.outputs.map((o) => [o.path, o.content.toString()])).toEqual([['r.txt', 'result\n']]);
    expect(result.cleaned).toBe(true);
    expect(labelled(plan.execution_id)).toBe('');
  });

  it('runs as a uid of its own with no capabilities, on a read-only root with a writable /tmp', async () => {
    const plan = makePlan({
      image: image.tag,
      imageDigest: image.digest,
      argv: [
        'sh',
        '-c',
        'id -u; grep CapEff /proc/self/status; touch /tmp/ok && echo tmp-ok; touch /x 2>/dev/null || echo root-ro',
      ],
    });
    const { handle, chunks } = start(plan);
    const result = await handle.done;
    expect(result.failure_reason).toBeNull();
    const out = text(chunks, 'stdout');
    const uid = Number(out.split('\n')[0]);
    expect(uid).not.toBe(0);
    if (process.getuid?.() === 0) expect(uid).toBeGreaterThanOrEqual(FIRST_UID);
    expect(out).toMatch(/CapEff:\s+0000000000000000/);
    expect(out).toContain('tmp-ok');
    expect(out).toContain('root-ro');
  });

  it('reports its exit code', async () => {
    const { handle } = start(makePlan({ image: image.pinned, argv: ['sh', '-c', 'exit 3'] }));
    const result = await handle.done;
    expect(result.exit_code).toBe(3);
    expect(result.failure_reason).toBe('EXIT_NONZERO');
  });
});

describe('network none', () => {
  let server: Server;
  let port: number;
  beforeAll(async () => {
    server = createServer((s) => s.end('reached\n'));
    await new Promise<void>((r) => server.listen(0, '0.0.0.0', () => r()));
    port = (server.address() as { port: number }).port;
  });
  afterAll(() => server.close());

  it('cannot reach a TCP port on the host', async () => {
    const hostIp = execFileSync('hostname', ['-I']).toString().trim().split(/\s+/)[0] ?? '127.0.0.1';
    const probe = (ip: string) =>
      `echo | nc -w 2 ${ip} ${port} && echo CONNECTED-${ip} || echo refused-${ip}`;
    const plan = makePlan({
      image: image.pinned,
      argv: ['sh', '-c', `${probe('127.0.0.1')}; ${probe(hostIp)}`],
    });
    const { handle, chunks } = start(plan);
    const result = await handle.done;
    expect(result.failure_reason).toBeNull();
    const out = text(chunks, 'stdout');
    expect(out).not.toContain('CONNECTED');
    expect(out).not.toContain('reached');
    expect(out).toContain(`refused-${hostIp}`);
  });
});

describe('stopping a container task', () => {
  it('cancel stops it and leaves no container', async () => {
    const plan = makePlan({ image: image.pinned, argv: ['sh', '-c', 'echo up; sleep 600'], grace: 1 });
    const { handle, chunks } = start(plan);
    expect(await handle.started).not.toBeNull();
    await waitFor(() => text(chunks, 'stdout').includes('up'), {
      what: 'the task to start',
      timeoutMs: 30_000,
    });
    handle.cancel('test');
    const result = await handle.done;
    expect(result.failure_reason).toBe('CANCELLED');
    expect(result.cleaned).toBe(true);
    expect(labelled(plan.execution_id)).toBe('');
  });

  it('cancel right after the start, before the engine has made the container, leaves none', async () => {
    for (let i = 0; i < 3; i++) {
      const plan = makePlan({ image: image.pinned, argv: ['sleep', '600'], grace: 0.5 });
      const { handle } = start(plan);
      await handle.started;
      handle.cancel('test');
      const result = await handle.done;
      expect(result.failure_reason).toBe('CANCELLED');
      expect(result.cleaned).toBe(true);
      expect(labelled(plan.execution_id)).toBe('');
    }
  });

  it('the time limit stops it and leaves no container', async () => {
    const plan = makePlan({ image: image.pinned, argv: ['sh', '-c', 'sleep 600'], timeLimit: 2, grace: 1 });
    const { handle } = start(plan);
    const result = await handle.done;
    expect(result.failure_reason).toBe('TIMED_OUT');
    expect(result.cleaned).toBe(true);
    expect(labelled(plan.execution_id)).toBe('');
  });
});

describe('without its worker (docs/security.md "The task sandbox")', () => {
  it("podman's backstop ends a container whose client and worker are gone, at its --timeout", async () => {
    const id = `backstop-${process.pid}`;
    const taskDir = mkdtempSync(join(dataDir, 'backstop-'));
    const envFile = join(taskDir, 'env');
    writeFileSync(envFile, '');
    const args = containerArgs({
      engine: 'podman',
      name: containerName(id),
      executionId: id,
      image: image.pinned,
      taskDir,
      envFile,
      inlineEnv: [],
      devices: { kind: 'nodes', nodes: [] },
      network: 'none',
      user: { uid: 65534, gid: 65534 },
      limits: null,
      init: false,
      argv: ['sleep', '300'],
      backstopSeconds: 3,
    });
    const client = spawn(image.setup.command, args, {
      env: { ...image.setup.env },
      stdio: 'ignore',
      detached: true,
    });
    await waitFor(() => labelled(id) !== '', { timeoutMs: 30_000 });
    // The worker and its engine client die; the container lives on under conmon, until the backstop.
    process.kill(-client.pid!, 'SIGKILL');
    await waitFor(() => labelled(id) === '', { timeoutMs: 40_000 });
    rmSync(taskDir, { recursive: true, force: true });
  }, 90_000);
});

describe('refused before it runs', () => {
  it('an image whose digest differs from the required one is SETUP_FAILED, naming the image', async () => {
    const other = `sha256:${'0'.repeat(64)}`;
    const { handle } = start(makePlan({ image: image.tag, imageDigest: other, argv: ['true'] }));
    const result = await handle.done;
    expect(result.failure_reason).toBe('SETUP_FAILED');
    expect(result.setup_error).toContain(
      `image ${image.tag} on worker worker-1 has digest ${image.digest}, not ${other}`,
    );
    expect(await handle.started).toBeNull();
  });

  it('a spec pinned to another digest is SETUP_FAILED', async () => {
    const pinned = `localhost/gpu-broker-test-busybox@sha256:${'0'.repeat(64)}`;
    const { handle } = start(makePlan({ image: pinned, argv: ['true'] }));
    const result = await handle.done;
    expect(result.failure_reason).toBe('SETUP_FAILED');
    expect(result.setup_error).toContain(`image ${pinned}`);
  });

  it('a spec with inputs is SETUP_FAILED rather than run without its reviewed files', async () => {
    const plan = makePlan({ image: image.pinned, argv: ['true'] });
    const withInputs: ExecutionPlan = {
      ...plan,
      spec: { ...plan.spec, inputs: [{ path: 'train.py', sha256: 'a'.repeat(64), size: 1 }] },
    };
    const { handle } = start(withInputs);
    const result = await handle.done;
    expect(result.failure_reason).toBe('SETUP_FAILED');
    expect(result.setup_error).toContain('not supported for container tasks yet');
    expect(await handle.started).toBeNull();
  });

  it('a missing image is SETUP_FAILED, saying to load it', async () => {
    const { handle } = start(makePlan({ image: 'localhost/gpu-broker-no-such-image:1', argv: ['true'] }));
    const result = await handle.done;
    expect(result.failure_reason).toBe('SETUP_FAILED');
    expect(result.setup_error).toBe(
      'image localhost/gpu-broker-no-such-image:1 is not present on worker worker-1: podman pull/load it there (the worker never pulls)',
    );
  });
});
