import { startMaster } from '../../main.js';
import { loadConfigFile, type MasterConfig, parseConfig } from '../../platform/config.js';
import { createLogger } from '../../platform/logger.js';
import { parseCommand } from '../common/args.js';
import type { CommandRunner } from '../common/io.js';
import { dataDirOf } from '../common/local.js';
import { reportError } from '../common/output.js';
import { SERVE } from './command-specs.js';

/** Builds the config from --config and the flags that override it. */
export function configFromFlags(values: {
  listen?: string | undefined;
  tls?: string | undefined;
  san?: string[] | undefined;
  config?: string | undefined;
}): MasterConfig {
  const base = values.config ? loadConfigFile(values.config) : parseConfig({});
  return parseConfig(
    {
      ...base,
      ...(values.listen ? { listen: values.listen } : {}),
      tls: { mode: values.tls ?? base.tls.mode, sans: [...base.tls.sans, ...(values.san ?? [])] },
    },
    'flags',
  );
}

/** `gpu-broker serve`: runs the master until SIGINT/SIGTERM. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(SERVE, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  try {
    const master = await startMaster({
      dataDir: dataDirOf(values, io),
      logger: createLogger(io.env['GPU_BROKER_LOG_LEVEL'] ?? 'info', { buffered: true }),
      config: configFromFlags(values),
    });
    io.stderr(
      [
        `gpu-broker master listening on ${master.url}`,
        master.caCertPath ? `CA certificate for clients: ${master.caCertPath}` : 'TLS is off (loopback only)',
        master.bootstrappedOperatorToken
          ? `first start: operator token written to ${master.operatorTokenPath} (mode 0600)`
          : `operator token file: ${master.operatorTokenPath}`,
        '',
      ].join('\n'),
    );
    if (values.json)
      io.stdout(
        `${JSON.stringify({ url: master.url, ca_file: master.caCertPath, operator_token_file: master.operatorTokenPath })}\n`,
      );
    await io.stopSignal;
    await master.close();
    return 0;
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
