import { parseArgs } from 'node:util';
import { BrokerError } from '../contracts/errors.js';
import type { CommandRunner } from './io.js';
import { REMOTE_OPTIONS, withMaster } from './master-client.js';
import { emit, reportError } from './output.js';

/** `gpu-broker cordon|uncordon WORKER:CARD`, `drain|undrain WORKER`, `reconcile TASK` for operators. */
export const run: CommandRunner = async (argv, io) => {
  const [verb, ...rest] = argv;
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: { ...REMOTE_OPTIONS, reason: { type: 'string' }, resolution: { type: 'string' } },
  });
  try {
    const target = positionals[0];
    if (!target)
      throw new BrokerError(
        'INVALID_INPUT',
        `which ${verb === 'reconcile' ? 'task' : verb?.endsWith('drain') || verb === 'remove-worker' ? 'worker' : 'card'}?`,
        'See gpu-broker --help.',
      );
    return await withMaster(values, io, async (c) => {
      let out: unknown;
      if (verb === 'cordon' || verb === 'uncordon') {
        const m = /^(.+):(\d+)$/.exec(target);
        if (!m)
          throw new BrokerError(
            'INVALID_INPUT',
            `expected WORKER:CARD, got "${target}"`,
            'e.g. gpu-broker cordon gpu-host-1:3 --reason "ECC errors"',
          );
        out = await c.post(
          `/api/v1/workers/${encodeURIComponent(m[1]!)}/cards/${m[2]}/${verb}`,
          values.reason ? { reason: values.reason } : {},
        );
      } else if (verb === 'drain' || verb === 'undrain' || verb === 'remove-worker') {
        const action = verb === 'remove-worker' ? 'remove' : verb;
        out = await c.post(`/api/v1/workers/${encodeURIComponent(target)}/${action}`, {});
      } else if (verb === 'reconcile') {
        if (!values.resolution || !values.reason)
          throw new BrokerError(
            'INVALID_INPUT',
            '--resolution and --reason are required',
            'e.g. --resolution FAILED --reason "host rebooted; cards idle"',
          );
        out = await c.post(`/api/v1/tasks/${encodeURIComponent(target)}/reconcile`, {
          resolution: values.resolution,
          reason: values.reason,
        });
      } else
        throw new BrokerError('INVALID_INPUT', `unknown command ${verb ?? ''}`, 'See gpu-broker --help.');
      emit(io, values.json, out, () => `${verb} ${target}: ok`);
      return 0;
    });
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
