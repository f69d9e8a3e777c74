import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { run } from '../../../../src/cli/operator/usage.js';

/**
 * Attack on `gpu-broker usage --csv` (src/cli/operator/usage.ts): the table escapes every key with
 * escapeField, but the CSV path writes keys raw. A card model is whatever the worker's sample says
 * (src/contracts/sample.ts: any string up to 128 characters), so a worker (or anyone holding a worker
 * token) names a card "\x1b]0;pwned\x07\x1b[2J…" and an operator running `gpu-broker usage --by model
 * --csv` in a terminal gets the escape sequences executed (title set, screen cleared, fake lines).
 * A key starting with = + - @ is also a spreadsheet formula when the CSV is opened (CSV injection).
 */
let server: Server | undefined;
afterEach(() => server?.close());

describe('attack: control characters in usage --csv', () => {
  it('writes no raw control character of a model name to stdout', async () => {
    const evil = '\x1b]0;pwned\x07\x1b[2JH100';
    server = createServer((_req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          by: 'model',
          since: '2026-12-01T00:00:00.000Z',
          until: '2026-12-08T00:00:00.000Z',
          account: null,
          lines: [{ key: evil, simulated: false, card_seconds: 3600, card_hours: 1, leases: 1 }],
          total_card_seconds: 3600,
        }),
      );
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as AddressInfo).port;
    let out = '';
    let err = '';
    const code = await run(['--by', 'model', '--csv', '--url', `http://127.0.0.1:${port}`], {
      stdout: (s) => {
        out += s;
      },
      stderr: (s) => {
        err += s;
      },
      env: { GPU_BROKER_TOKEN: 't' },
    });
    expect(code, err).toBe(0);
    expect(out).toContain('H100');
    expect(out).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f]/);
  });
});
