/**
 * Per-principal caps on pending grant requests (docs/security.md "Fair share between principals"): 171 request_grant calls in 20 s added
 * 299 MiB to the database (a scope's env rules alone may hold 64 × 64 values of 1 KiB) and made one
 * reviewer's page of grants 44 MiB. A request counts against its requester (created_by) while it is
 * REQUESTED; once decided, withdrawn or expired it no longer does. Before a request is stored the shell
 * reads the requester's pending count and bytes and asks here; a refusal names the cap, the usage and
 * what to do, and nothing is written.
 *
 * Pure: usage in, the first cap the new request would break (or null) out.
 */

/** The caps (master config `quotas`); null turns one off. */
export interface GrantQuotas {
  max_pending_grant_requests: number | null;
  max_pending_grant_request_bytes: number | null;
}

/** What the requester has pending and is about to add. */
export interface GrantRequestUsage {
  pending: number;
  pending_bytes: number;
  /** The new request's stored size (scope and reason). */
  new_bytes: number;
}

/** A cap the new request would break. */
export interface GrantQuotaBreach {
  cap: keyof GrantQuotas;
  limit: number;
  used: number;
  message: string;
  hint: string;
}

/** The first cap that storing the new request would break, or null. */
export function grantRequestQuotaBreach(u: GrantRequestUsage, q: GrantQuotas): GrantQuotaBreach | null {
  if (q.max_pending_grant_requests !== null && u.pending >= q.max_pending_grant_requests)
    return {
      cap: 'max_pending_grant_requests',
      limit: q.max_pending_grant_requests,
      used: u.pending,
      message: `you have ${u.pending} grant requests waiting for a decision; the cap is ${q.max_pending_grant_requests}`,
      hint: 'Wait for a reviewer to decide them, or withdraw ones you no longer need (revoke_grant on your own REQUESTED grant).',
    };
  if (
    q.max_pending_grant_request_bytes !== null &&
    u.pending_bytes + u.new_bytes > q.max_pending_grant_request_bytes
  )
    return {
      cap: 'max_pending_grant_request_bytes',
      limit: q.max_pending_grant_request_bytes,
      used: u.pending_bytes,
      message: `this request's scope and reason are ${u.new_bytes} bytes; with your pending requests' ${u.pending_bytes} that is over ${q.max_pending_grant_request_bytes}`,
      hint: 'Narrow the scope (fewer env values, globs, workers; a shorter reason), or withdraw pending requests you no longer need.',
    };
  return null;
}
