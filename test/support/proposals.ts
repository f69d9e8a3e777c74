import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { RevisionResult } from '../../src/broker/tools/proposals.js';
import { callTool, expectOk } from './mcp.js';
import { validSpec } from './spec.js';

let keys = 0;
const key = () => `in-review-${process.pid}-${++keys}`;

/** create_proposal (a valid spec unless one is given), then confirm_revision: the proposal is IN_REVIEW. */
export async function proposeInReview(client: Client, spec: unknown = validSpec()): Promise<RevisionResult> {
  const r = expectOk(
    await callTool<RevisionResult>(client, 'create_proposal', { spec, idempotency_key: key() }),
  );
  expectOk(
    await callTool(client, 'confirm_revision', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      idempotency_key: key(),
    }),
  );
  return r;
}

/** What upload_inputs answers, as the tests read it. */
export interface UploadResult {
  inputs: Array<{ path: string; sha256: string; size: number }>;
  stored_bytes: number;
  quota: { used_bytes: number; limit_bytes: number };
}
