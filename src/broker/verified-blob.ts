import { BrokerError } from '../contracts/errors.js';
import { sha256Hex } from '../platform/digest.js';
import type { BrokerDeps } from './deps.js';

/**
 * The one read of input bytes (issue 13, issue 20): every reader — get_input, the reviewer's diff, the
 * proposal's policy facts, a worker's fetch — gets a blob through here, in the name of a principal who
 * uploaded it, re-hashed on every read. Shared by tools/inputs.ts, tools/proposals.ts and
 * tools/revision-diff.ts, so it sits below all three.
 */

/**
 * The bytes of a blob `ownerId` uploaded, verified against its name. A blob the owner did not upload is
 * NOT_FOUND with the same words as one that is not stored; a stored blob that does not match its
 * digest is refused (INTERNAL) and logged.
 */
export function verifiedBlob(deps: BrokerDeps, ownerId: string, sha256: string): Buffer {
  const content = deps.store.blobs.contentUploadedBy(ownerId, sha256);
  if (content === undefined)
    throw new BrokerError(
      'NOT_FOUND',
      `no stored input has sha256 ${sha256}`,
      'The proposal’s owner uploads it with upload_inputs or PUT /api/v1/blobs/{sha256}.',
    );
  const actual = sha256Hex(content);
  if (actual !== sha256) {
    deps.logger.error({ sha256, actual }, 'input blob does not match its digest; refusing to serve it');
    throw new BrokerError(
      'INTERNAL',
      `the stored content for ${sha256} does not match its digest`,
      'The master store was changed outside gpu-broker; upload the file again after an operator removes the damaged blob.',
    );
  }
  return content;
}
