import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TaskSpecInput } from '../../src/contracts/task-spec.js';
import { packageRoot } from '../../src/platform/package-root.js';
import { createCaTrustingFetch } from '../../src/platform/tls.js';
import { ensureBuilt } from '../support/build.js';
import { type ChildMaster, spawnMaster } from '../support/cli.js';
import { approveTask, shellSpec, waitUntilSettled } from '../support/cluster.js';
import { callTool, connectMcpClient, expectOk } from '../support/mcp.js';
import { makeTempDir, removeTempDirs } from '../support/temp.js';
import { waitFor } from '../support/wait.js';

/**
 * `gpu-broker start` as a new user runs it (the README's first command): the built CLI as a child
 * process, a master and its local worker on simulated cards, then an agent's task through the real MCP
 * client with the token files it printed. Once sandboxed (bubblewrap, as ensure-test-deps installs), once
 * with `--isolation none`, where the banner and list_workers say UNISOLATED and this development master
 * still runs the task.
 */

let started: ChildMaster | null = null;

beforeAll(() => ensureBuilt());
afterEach(async () => {
  await started?.stop();
  started = null;
  removeTempDirs();
});

interface WorkerRow {
  worker_id: string;
  isolation: string;
  unisolated: boolean;
}

async function runOneTask(extraArgs: string[], alsoRun: TaskSpecInput[] = []) {
  const dataDir = makeTempDir('start');
  started = await spawnMaster(dataDir, ['--gpus', 'sim:2', ...extraArgs], { command: 'start', config: null });
  const { fetch } = createCaTrustingFetch(readFileSync(started.caFile!, 'utf8'));
  const agent = await connectMcpClient(
    started.url,
    readFileSync(join(dataDir, 'agent.token'), 'utf8').trim(),
    fetch,
  );
  const reviewer = await connectMcpClient(
    started.url,
    readFileSync(join(dataDir, 'reviewer.token'), 'utf8').trim(),
    fetch,
  );
  await waitFor(
    async () =>
      expectOk(await callTool<{ cards: Array<{ state: string }> }>(agent, 'list_cards', {})).cards.filter(
        (c) => c.state === 'AVAILABLE',
      ).length === 2,
    { timeoutMs: 20_000, what: 'two AVAILABLE cards on the local worker' },
  );
  const taskId = await approveTask(
    agent,
    reviewer,
    shellSpec('echo "uid=$(id -u) nodes=$(cd /dev && echo nvidia*)"', { cards: { count: 1 } }),
  );
  const task = await waitUntilSettled(agent, taskId, 30_000);
  const logs = expectOk(await callTool<{ data: string }>(agent, 'get_task_logs', { task_id: taskId }));
  const also: Array<{ state: string; logs: string }> = [];
  for (const spec of alsoRun) {
    const id = await approveTask(agent, reviewer, spec);
    const t = await waitUntilSettled(agent, id, 30_000);
    const l = expectOk(await callTool<{ data: string }>(agent, 'get_task_logs', { task_id: id }));
    also.push({ state: t.state, logs: l.data });
  }
  const workers = expectOk(await callTool<{ workers: WorkerRow[] }>(agent, 'list_workers', {}));
  await agent.close();
  await reviewer.close();
  return { task, logs: logs.data, worker: workers.workers[0]!, banner: started.stderr(), also, dataDir };
}

describe('gpu-broker start', () => {
  it('sandboxes the local worker when bubblewrap works, and runs an agent task on one simulated card', async () => {
    // No --config: the starter config it writes allows /bin/sh and /usr/bin/python3 (docs/operations.md).
    // The client kit's example for simulated cards (docs/operations.md) runs as it is.
    const example = JSON.parse(
      readFileSync(join(packageRoot(), 'client-kit', 'examples', 'sim-smoke-1card.json'), 'utf8'),
    ) as TaskSpecInput;
    // And so does the SKILL's own first example (docs/operations.md).
    const skill = readFileSync(join(packageRoot(), 'client-kit', 'SKILL.md'), 'utf8');
    const skillSpec = JSON.parse(skill.split('```json\n')[1]!.split('```')[0]!) as TaskSpecInput;
    const { task, logs, worker, banner, also, dataDir } = await runOneTask([], [example, skillSpec]);
    expect(also.map((a) => a.state)).toEqual(['COMPLETED', 'COMPLETED']);
    expect(JSON.parse(also[0]!.logs)).toMatchObject({
      CUDA_VISIBLE_DEVICES: '0',
      python: expect.any(String),
    });
    expect(also[1]!.logs).toBe('hello\n');
    const configFile = join(dataDir, 'config.json');
    expect(JSON.parse(readFileSync(configFile, 'utf8'))).toEqual({
      policy: { executables: [{ path: '/usr/bin/python3' }, { path: '/bin/sh' }], allow_network: false },
    });
    expect(banner).toContain(`config:          ${configFile} (starter config, written now)`);
    expect(banner).toMatch(
      /may run:\s+\/usr\/bin\/python3, \/bin\/sh, the bundled qualification workload \(\/usr\/bin\/python3 qualify\.py, pinned\)\n/,
    );
    expect(banner).toMatch(/network:\s+none for any task/);
    expect(banner).not.toContain('only the bundled qualification workload may run');
    // Item 5: the CA is added to the public roots, never replaces them; commands work in a checkout.
    expect(banner).toContain(
      `export NODE_EXTRA_CA_CERTS=${started!.caFile} CODEX_CA_CERTIFICATE=${started!.caFile}`,
    );
    expect(banner).not.toContain('SSL_CERT_FILE');
    expect(banner).toContain('npx gpu-broker review list');
    expect(banner).toContain(
      `dashboard:       ${started!.url}/ (sign in with the contents of a token file above)`,
    );
    expect(banner).not.toMatch(/[^x] gpu-broker (review|mcp-stdio)/);
    expect(task.state).toBe('COMPLETED');
    expect(task.simulated).toBe(true);
    expect(worker).toMatchObject({ isolation: 'bwrap', unisolated: false });
    expect(banner).toContain('NOT real GPUs');
    expect(banner).toMatch(/tasks:\s+sandboxed/);
    // Its own uid, and exactly its one leased card's node.
    expect(logs).toMatch(/^uid=(\d+) nodes=nvidia\d\n$/);
    if (process.getuid?.() === 0) expect(logs).not.toContain('uid=0 ');
  });

  it('with --isolation none says UNISOLATED everywhere, and this development master still runs the task', async () => {
    const { task, worker, banner } = await runOneTask([
      '--config',
      writeShellPolicy(),
      '--isolation',
      'none',
    ]);
    expect(banner).toMatch(/tasks:\s+UNISOLATED \(--isolation none\): tasks run as plain processes/);
    // One line says require_isolation is off here; the tasks: line does not say it again.
    expect(banner.match(/require_isolation/g)).toEqual(['require_isolation']);
    expect(banner).toContain('require_isolation is OFF');
    expect(worker).toMatchObject({ isolation: 'none', unisolated: true });
    expect(task.state).toBe('COMPLETED');
  });

  it('with an UNISOLATED local worker, the starter config allows only the pinned workload', async () => {
    const dataDir = makeTempDir('start');
    started = await spawnMaster(dataDir, ['--gpus', 'sim:1', '--isolation', 'none'], {
      command: 'start',
      config: null,
    });
    const configFile = join(dataDir, 'config.json');
    expect(JSON.parse(readFileSync(configFile, 'utf8'))).toEqual({
      policy: { executables: [], allow_network: false },
    });
    const banner = started.stderr();
    expect(banner).toMatch(/may run:\s+the bundled qualification workload \(\S+ qualify\.py, pinned\)\n/);
    expect(banner).toContain('UNISOLATED');
  });

  it('a starter written while UNISOLATED follows the machine once bubblewrap works; an edited one is kept', async () => {
    // ADR 0029: "install bubblewrap and restart" must make python3 allowed.
    const dataDir = makeTempDir('start');
    const configFile = join(dataDir, 'config.json');
    const startOnce = async (args: string[]) => {
      started = await spawnMaster(dataDir, ['--gpus', 'sim:1', ...args], { command: 'start', config: null });
      const banner = started.stderr();
      await started.stop();
      started = null;
      return banner;
    };
    await startOnce(['--isolation', 'none']);
    expect(JSON.parse(readFileSync(configFile, 'utf8')).policy.executables).toEqual([]);

    const sandboxed = await startOnce([]);
    expect(sandboxed).toContain(
      `config:          ${configFile} (starter config, rewritten: tasks are sandboxed now`,
    );
    expect(sandboxed).toMatch(/may run:\s+\/usr\/bin\/python3, \/bin\/sh, the bundled/);
    expect(JSON.parse(readFileSync(configFile, 'utf8')).policy.executables).toEqual([
      { path: '/usr/bin/python3' },
      { path: '/bin/sh' },
    ]);
    // Unchanged machine, unchanged file: kept, nothing rewritten. GPU_BROKER_LOG_LEVEL applies to start.
    process.env['GPU_BROKER_LOG_LEVEL'] = 'warn';
    const quiet = await startOnce([]).finally(() => delete process.env['GPU_BROKER_LOG_LEVEL']);
    expect(quiet).toContain('(starter config from an earlier start)');
    expect(quiet).not.toContain('Server listening');

    // The operator's edit is theirs: kept whatever the sandbox, and the banner says what could be allowed.
    const edited = `${JSON.stringify({ policy: { executables: [{ path: '/usr/bin/python3' }] } })}\n`;
    writeFileSync(configFile, edited);
    expect(await startOnce(['--isolation', 'none'])).toContain('(edited by you, kept as it is)');
    const after = await startOnce([]);
    expect(readFileSync(configFile, 'utf8')).toBe(edited);
    expect(after).toMatch(/could allow:\s+\/bin\/sh \(tasks are sandboxed now\)/);
    expect(after).toMatch(/may run:\s+\/usr\/bin\/python3, the bundled/);
  });
});

/** A config file allowing /bin/sh (the default policy allows only the qualification workload). */
function writeShellPolicy(): string {
  const dir = makeTempDir('start-config');
  const path = join(dir, 'config.json');
  writeFileSync(path, JSON.stringify({ policy: { executables: [{ path: '/bin/sh' }] } }));
  return path;
}
