import { startWorker } from '../../../worker/daemon/start-worker.js';
import { sharedSpawner } from '../../../worker/local/spawner.js';
import { selectSampler } from '../../../worker/samplers/select-sampler.js';
import { prepareSandbox } from '../../../worker/sandbox/setup.js';
import { BrokerError } from '../../contracts/errors.js';
import { parseCommand } from '../common/args.js';
import type { CliIo, CommandRunner } from '../common/io.js';
import { reportError } from '../common/output.js';
import { WORKER } from './command-specs.js';
import { resolveSettings, type Settings, sharedWorkerOptions, USAGE } from './worker-settings.js';
import { runSlurmWorker } from './worker-slurm.js';

/**
 * `gpu-broker worker --url URL --token-file FILE [--id ID] [--gpus auto|nvidia|hy|sim:N]
 * [--data-dir DIR] [--ca-file FILE] [--isolation auto|bwrap|none] [--sandbox-engine auto|bwrap|native] [--task-uids FIRST-LAST] [--hide PATH]…
 * [--container-engine auto|podman|docker|none] [--keep-executions N] [--keep-executions-days D] [--json]`: runs the worker daemon until SIGINT/SIGTERM, then stops it cleanly (running executions are
 * cancelled and reported). Says first whether the cards are real or simulated, and how tasks are
 * isolated; `auto` (the default) refuses to start without a working bubblewrap rather than run tasks
 * unsandboxed (worker/sandbox/setup.ts). `--container-engine auto` (the default) runs `container` tasks with
 * podman when it can start a container here, else docker, else none: never fatal, the banner says which
 * and, with none, that container tasks wait for another worker (worker/sandbox/container.ts).
 *
 * The flags are read in worker-settings.ts; `--backend slurm` runs in worker-slurm.ts.
 */

/** `gpu-broker worker`: see the module comment. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(WORKER, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  try {
    const settings = resolveSettings(values, io);
    if (settings.slurm !== undefined) return await runSlurmWorker(settings, settings.slurm, values.json, io);
    return await runLocalWorker(settings, values.json, io);
  } catch (err) {
    return reportError(io, values.json, err);
  }
};

/** A local worker: this host's cards, tasks in its sandbox; runs until the stop signal. */
async function runLocalWorker(settings: Settings, json: boolean | undefined, io: CliIo): Promise<number> {
  const choice = await selectSampler({ gpus: settings.gpus, env: io.env, simSeed: settings.workerId });
  const sandbox = await prepareSandbox({
    isolation: settings.isolation,
    sandboxEngine: settings.sandboxEngine,
    dataDir: settings.dataDir,
    // The token file is hidden in every sandbox wherever the operator keeps it (docs/security.md "Code the reviewer did not read").
    hiddenPaths: [...settings.hide, ...(settings.tokenFile === undefined ? [] : [settings.tokenFile])],
    sampler: choice.sampler,
    containerEngine: settings.containerEngine,
    seccompAllow: settings.seccompAllow,
    ...(settings.taskUids === undefined ? {} : { taskUids: settings.taskUids }),
  }).catch((err: unknown) => {
    throw new BrokerError('INVALID_INPUT', (err as Error).message, USAGE);
  });
  const worker = await startWorker({
    ...sharedWorkerOptions(settings, choice.sampler, io),
    ...(settings.runAs === undefined ? {} : { runAs: settings.runAs }),
    sandbox: sandbox.setup,
    ...(sandbox.containers === undefined ? {} : { containers: sandbox.containers }),
    ...(settings.mounts.length === 0 ? {} : { mounts: settings.mounts }),
  });
  const cards = worker.latestCards();
  const count = cards === null ? null : cards.length;
  const summary = choice.simulated
    ? `SIMULATED cards: sim:${count ?? '?'} — ${choice.summary.replace(/^SIMULATED cards:\s*/, '')}`
    : `real cards: ${choice.provider} (${count === null ? 'no sample yet' : `${count} card${count === 1 ? '' : 's'}`})`;
  if (json) {
    io.stdout(
      `${JSON.stringify({
        worker_id: worker.workerId,
        boot_id: worker.bootId,
        provider: choice.provider,
        simulated: choice.simulated,
        cards: count,
        summary,
        isolation: sandbox.isolation,
        isolation_summary: sandbox.summary,
        container_engine: sandbox.containers?.setup.engine ?? null,
        container_summary: sandbox.containerSummary,
        data_dir: settings.dataDir,
      })}\n`,
    );
  } else {
    io.stderr(
      `gpu-broker worker ${settings.workerId} → ${settings.url}\n${summary}\ntasks: ${sandbox.summary}\nstarted by: ${sharedSpawner().describe()}\n${sandbox.containerSummary}\ndata dir: ${settings.dataDir}\n`,
    );
  }
  await (io.stopSignal ?? new Promise<void>(() => undefined));
  await worker.close();
  return 0;
}
