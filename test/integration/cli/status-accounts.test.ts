import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrincipal } from '../../../src/broker/principals.js';
import { createAccount } from '../../../src/broker/tools/accounts.js';
import { run as status } from '../../../src/cli/operator/status.js';
import { runCli } from '../../support/cli.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';

/**
 * `gpu-broker status` shows an operator every account (the ACCOUNTS table: share, cards, nominal/limit,
 * card-hours this period, budget left, queued, why the first waits) and anyone else their own account in
 * words under the YOU line (src/broker/tools/account-standing.ts; docs/operations.md "Accounts and usage").
 */

let m: TestMaster;
let bobToken: string;

beforeAll(async () => {
  m = await startTestMaster();
  createAccount(m.deps, 'test', {
    name: 'team-b',
    nominal_cards: 2,
    borrowing_limit: 1,
    budget_card_hours: 40,
    budget_period: 'month',
  });
  bobToken = createPrincipal(m.deps, { name: 'bob', roles: ['submitter'], account: 'team-b' }).token;
});
afterAll(async () => {
  await m?.close();
});

const remote = (token: string) => ['--url', m.url, '--token', token, '--ca-file', m.caCertPath!];

describe('gpu-broker status: accounts', () => {
  it('prints every account for an operator, its quota and its budget left', async () => {
    const out = await runCli(status, remote(m.operatorToken));
    expect(out.code).toBe(0);
    const lines = out.stdout.split('\n');
    const at = lines.indexOf('ACCOUNTS');
    expect(at).toBeGreaterThanOrEqual(0);
    expect(lines[at + 1]).toMatch(
      /^ACCOUNT\s+SHARE\s+CARDS\s+NOMINAL\/LIMIT\s+USED \(PERIOD\)\s+BUDGET LEFT\s+QUEUED\s+FIRST WAITS$/,
    );
    const teamB = lines.find((l) => l.startsWith('team-b (in root)'))!;
    expect(teamB).toMatch(/50\.0 % \(0\)\s+0\s+2\/3\s+0\.00 h \(month\)\s+40\.00 of 40 h\s+0/);
    expect(lines.find((l) => l.startsWith('root '))).toBeDefined();
  });

  it('a submitter gets no ACCOUNTS table, and their own account in words', async () => {
    const out = await runCli(status, remote(bobToken));
    expect(out.code).toBe(0);
    expect(out.stdout).not.toContain('ACCOUNTS');
    expect(out.stdout).toContain(
      'team-b holds 0 of its 0 cards (may hold 3), 0 card-hours this month, 40 card-hours of budget left.',
    );
  });
});
