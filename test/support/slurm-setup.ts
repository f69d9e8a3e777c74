import { afterAll } from 'vitest';
import { takeSlurmSuiteLock } from './slurm-serial.js';

/**
 * The slurm project's setup file (vitest.config.ts): holds the machine's Slurm suite lock
 * (test/support/slurm-serial.ts) from before the test file is imported (its module code starts or
 * reuses the clusters) until after its last hook. A fork that dies drops the lock with it.
 */
const release = await takeSlurmSuiteLock();
afterAll(release);
