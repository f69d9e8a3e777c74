import { probeHost, runHostSetup } from './host-setup.js';

/**
 * `npm start`'s first step (package.json, before `gpu-broker start`): installs what the quick start needs
 * where it can, or prints the command (host-setup.ts). Always exits 0: `npm start` never fails because of it.
 */
try {
  runHostSetup(probeHost(process.env), process.env, (line) => process.stderr.write(`${line}\n`));
} catch (err) {
  process.stderr.write(`npm start setup: skipped (${(err as Error).message})\n`);
}
