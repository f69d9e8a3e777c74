import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../../src/contracts/errors.js';
import { parseMessage } from '../../../src/contracts/sequencing.js';
import {
  MasterMessageSchema,
  WORKER_LINK_ERROR_CODES,
  WorkerErrorCodeSchema,
  WorkerMessageSchema,
} from '../../../src/contracts/worker-protocol.js';

/** The worker link's `error` codes are a closed list, the same strings as before it was closed. */

/** What either end sent when `code` was an open string (docs/worker-protocol.md "Error replies"). */
const SENT = [
  'HELLO_REQUIRED',
  'INVALID_MESSAGE',
  'PROTOCOL_VERSION',
  'INVALID_WORKER_ID',
  'FORBIDDEN',
  'INTERNAL',
  'UNAVAILABLE',
  'NOT_FOUND',
  'STALE_EPOCH',
  'INVALID_INPUT',
  'INVALID_STATE',
  'CONFLICT',
  'UNKNOWN_EXECUTION',
];

describe('the worker link error codes', () => {
  it('accept every code either end sends, and every broker error code a refusal carries', () => {
    for (const code of [...SENT, ...ERROR_CODES])
      expect(WorkerErrorCodeSchema.safeParse(code).success).toBe(true);
    expect(new Set(WorkerErrorCodeSchema.options).size).toBe(
      ERROR_CODES.length + WORKER_LINK_ERROR_CODES.length,
    );
  });

  it('make an error message with another code invalid, in both directions', () => {
    const frame = JSON.stringify({ type: 'error', code: 'SOMETHING_ELSE', message: 'x', ref_seq: 3 });
    for (const schema of [WorkerMessageSchema, MasterMessageSchema]) {
      const parsed = parseMessage(schema, frame);
      expect(parsed.ok).toBe(false);
      if (!parsed.ok)
        expect(parsed.invalid).toMatchObject({ code: 'INVALID_MESSAGE', type: 'error', poison: null });
    }
    const known = JSON.stringify({ type: 'error', code: 'UNKNOWN_EXECUTION', message: 'x', ref_seq: 3 });
    expect(parseMessage(WorkerMessageSchema, known).ok).toBe(true);
    expect(
      parseMessage(
        MasterMessageSchema,
        JSON.stringify({ type: 'error', code: 'HELLO_REQUIRED', message: 'x' }),
      ).ok,
    ).toBe(true);
  });
});
