import { BrokerError } from '../contracts/errors.js';
import type { GrantScope } from '../contracts/standing-grant.js';
import { grantRequestQuotaBreach } from '../domain/retention/grant-quota.js';
import type { Principal } from '../store/principals-repo.js';
import type { BrokerDeps } from './deps.js';

/**
 * Refuses (QUOTA_EXCEEDED, nothing written) a grant request that would take its requester over
 * `quotas.max_pending_grant_requests` or `quotas.max_pending_grant_request_bytes`
 * (src/domain/retention/grant-quota.ts). Call inside request_grant's transaction, before the insert.
 */
export function checkGrantRequestQuota(
  deps: BrokerDeps,
  principal: Principal,
  request: { scope: GrantScope; reason: string },
): void {
  const pending = deps.store.grants.pendingRequestedBy(principal.id);
  const breach = grantRequestQuotaBreach(
    {
      pending: pending.count,
      pending_bytes: pending.bytes,
      new_bytes: Buffer.byteLength(JSON.stringify(request.scope)) + Buffer.byteLength(request.reason),
    },
    deps.config.quotas,
  );
  if (breach)
    throw new BrokerError('QUOTA_EXCEEDED', breach.message, breach.hint, {
      cap: `quotas.${breach.cap}`,
      limit: breach.limit,
      used: breach.used,
    });
}
