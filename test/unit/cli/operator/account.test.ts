import { join } from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { run as account } from '../../../../src/cli/operator/account.js';
import { run as token } from '../../../../src/cli/operator/token.js';
import type { ErrorBody } from '../../../../src/contracts/errors.js';
import { openStore } from '../../../../src/master/data-dir.js';
import { runCli } from '../../../support/cli.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

/** `gpu-broker account …` and `token create --account` on a data dir, in-process with captured output. */

let dataDir: string;

beforeEach(() => {
  dataDir = join(makeTempDir('cli-account'), 'data');
});

afterAll(() => removeTempDirs());

const acct = (...args: string[]) => runCli(account, [...args, '--data-dir', dataDir, '--json']);

interface AccountOut {
  name: string;
  parent: string | null;
  weight: number;
  share: number;
  principals: number;
}

/** The accounts table and the audit rows about accounts, as stored. */
function stored() {
  const store = openStore(dataDir);
  try {
    return {
      accounts: store.db.prepare('SELECT name, parent, weight FROM accounts ORDER BY name').all(),
      audit: store.db
        .prepare("SELECT action FROM audit_events WHERE subject_type = 'account' ORDER BY seq")
        .all(),
    };
  } finally {
    store.close();
  }
}

/** The model quotas as stored. */
function modelQuotaRows() {
  const store = openStore(dataDir);
  try {
    return store.accounts.modelQuotas();
  } finally {
    store.close();
  }
}

describe('gpu-broker account', () => {
  it('a fresh data dir has root and default; create, show, set and delete a team; shares follow weights', async () => {
    const list0 = (await acct('list')).json<{ accounts: AccountOut[] }>().accounts;
    expect(list0.map((a) => [a.name, a.parent])).toEqual([
      ['default', 'root'],
      ['root', null],
    ]);
    expect((await acct('create', 'org')).code).toBe(0);
    const a = await acct('create', 'team-a', '--parent', 'org', '--weight', '3', '--description', 'vision');
    expect(a.code).toBe(0);
    expect(a.json<{ account: AccountOut }>().account).toMatchObject({
      name: 'team-a',
      parent: 'org',
      weight: 3,
    });
    await acct('create', 'team-b', '--parent', 'org');
    const show = (await acct('show', 'team-a')).json<{ account: AccountOut }>().account;
    // root's children default and org weigh 1 each; under org, team-a 3 of 4.
    expect(show.share).toBeCloseTo(0.5 * 0.75, 5);
    expect(
      (await acct('set', 'team-a', '--weight', '1')).json<{ account: AccountOut }>().account.share,
    ).toBeCloseTo(0.25, 5);
    expect((await acct('delete', 'team-b')).code).toBe(0);
    expect(stored().accounts.map((r) => (r as { name: string }).name)).toEqual([
      'default',
      'org',
      'root',
      'team-a',
    ]);
    expect(stored().audit.map((r) => (r as { action: string }).action)).toEqual([
      'account.created',
      'account.created',
      'account.created',
      'account.changed',
      'account.deleted',
    ]);
  });

  it('bad input is a typed error and changes nothing', async () => {
    await acct('create', 'org');
    await acct('create', 'team-a', '--parent', 'org');
    const before = stored();
    const cases: Array<[string[], string]> = [
      [['create', 'Bad Name'], 'INVALID_INPUT'],
      [['create', 'org'], 'CONFLICT'],
      [['create', 'x', '--parent', 'nowhere'], 'NOT_FOUND'],
      [['create', 'x', '--weight=-1'], 'INVALID_INPUT'],
      [['create', 'x', '--weight', '99999999'], 'INVALID_INPUT'],
      [['create', 'x', '--weight', '1e3'], 'INVALID_INPUT'],
      [['set', 'org', '--parent', 'team-a'], 'INVALID_INPUT'], // a cycle
      [['set', 'root', '--parent', 'org'], 'INVALID_INPUT'],
      [['set', 'nope', '--weight', '2'], 'NOT_FOUND'],
      [['delete', 'org'], 'INVALID_STATE'], // it holds team-a
      [['delete', 'root'], 'INVALID_INPUT'],
      [['delete', 'default'], 'INVALID_INPUT'],
      [['show'], 'INVALID_INPUT'],
    ];
    for (const [args, code] of cases) {
      const r = await acct(...args);
      expect(r.code, args.join(' ')).not.toBe(0);
      expect(r.json<{ error: ErrorBody }>().error.code, args.join(' ')).toBe(code);
    }
    expect(stored()).toEqual(before);
  });

  it('token create --account places a principal; an unknown account or root is refused; an account holding principals is not deleted', async () => {
    await acct('create', 'team-a');
    const t = await runCli(token, [
      'create',
      '--data-dir',
      dataDir,
      '--name',
      'alice',
      '--role',
      'submitter',
      '--account',
      'team-a',
      '--json',
    ]);
    expect(t.json<{ account: string }>().account).toBe('team-a');
    const plain = await runCli(token, [
      'create',
      '--data-dir',
      dataDir,
      '--name',
      'bob',
      '--role',
      'submitter',
      '--json',
    ]);
    expect(plain.json<{ account: string }>().account).toBe('default');
    for (const [name, where, code] of [
      ['carol', 'nowhere', 'NOT_FOUND'],
      ['dave', 'root', 'INVALID_INPUT'],
    ] as const) {
      const r = await runCli(token, [
        'create',
        '--data-dir',
        dataDir,
        '--name',
        name,
        '--role',
        'submitter',
        '--account',
        where,
        '--json',
      ]);
      expect(r.json<{ error: ErrorBody }>().error.code).toBe(code);
    }
    const list = await runCli(token, ['list', '--data-dir', dataDir]);
    expect(list.stdout).toMatch(/alice\s+submitter\s+team-a/);
    expect(list.stdout).not.toMatch(/carol|dave/);
    expect((await acct('show', 'team-a')).json<{ account: AccountOut }>().account.principals).toBe(1);
    const del = await acct('delete', 'team-a');
    expect(del.json<{ error: ErrorBody }>().error.message).toBe('account team-a still holds 1 principal(s)');
  });

  it('sets, shows and clears quotas; refuses what breaks them and changes nothing', async () => {
    await acct('create', 'org', '--nominal', '8');
    const a = await acct('create', 'team-a', '--parent', 'org', '--nominal', '4', '--borrow', '2');
    expect(a.json<{ account: { quotas: unknown } }>().account.quotas).toEqual({
      nominal_cards: 4,
      borrowing_limit: 2,
      budget_card_hours: null,
      budget_period: null,
    });
    const set = await acct('set', 'team-a', '--budget', '500', '--period', 'week');
    expect(set.json<{ account: { quotas: unknown } }>().account.quotas).toMatchObject({
      budget_card_hours: 500,
      budget_period: 'week',
    });
    const human = await runCli(account, ['list', '--data-dir', dataDir]);
    expect(human.stdout).toMatch(/team-a\s+org\s+1\s+[\d.]+%\s+nominal 4 \+2 500 h\/week/);
    const before = stored();
    for (const [args, code] of [
      [['set', 'team-a', '--nominal', '9'], 'INVALID_INPUT'], // past org's 8
      [['set', 'org', '--nominal', '3'], 'INVALID_INPUT'], // below team-a's 4
      [['create', 'y', '--budget', '10'], 'INVALID_INPUT'], // no period
      [['set', 'team-a', '--period', 'year'], 'INVALID_INPUT'],
      [['set', 'team-a', '--borrow', 'lots'], 'INVALID_INPUT'],
      [['create', 'x', '--borrow', '2'], 'INVALID_INPUT'], // no nominal to borrow beyond
    ] as const) {
      const r = await acct(...args);
      expect(r.json<{ error: ErrorBody }>().error.code, args.join(' ')).toBe(code);
    }
    expect(stored()).toEqual(before);
    const cleared = await acct('set', 'team-a', '--nominal', 'none', '--borrow', 'any', '--budget', 'none');
    expect(cleared.json<{ account: { quotas: unknown } }>().account.quotas).toEqual({
      nominal_cards: null,
      borrowing_limit: null,
      budget_card_hours: null,
      budget_period: null,
    });
  });

  it('--model sets, shows and clears a quota per card model beside the account-wide one; bad input changes nothing', async () => {
    await acct('create', 'org', '--model', 'H100', '--nominal', '8');
    await acct('create', 'team-a', '--parent', 'org', '--nominal', '10');
    const set = await acct(
      'set',
      'team-a',
      '--model',
      'H100',
      '--nominal',
      '4',
      '--borrow',
      '2',
      '--budget',
      '100',
      '--period',
      'week',
    );
    expect(set.code).toBe(0);
    const shown = set.json<{ account: { quotas: unknown; model_quotas: unknown } }>().account;
    // The account-wide quota is untouched; the model's sits beside it.
    expect(shown.quotas).toMatchObject({ nominal_cards: 10, borrowing_limit: null });
    expect(shown.model_quotas).toEqual([
      { model: 'H100', nominal_cards: 4, borrowing_limit: 2, budget_card_hours: 100, budget_period: 'week' },
    ]);
    // Another spelling of the same model is the same quota.
    await acct('set', 'team-a', '--model', 'h100', '--borrow', 'any');
    await acct('set', 'team-a', '--model', 'A100', '--nominal', '2');
    const human = await runCli(account, ['show', 'team-a', '--data-dir', dataDir]);
    expect(human.stdout).toMatch(
      /nominal 10 \+any; A100: nominal 2 \+any; h100: nominal 4 \+any 100 h\/week/,
    );
    const before = stored();
    const quotasBefore = modelQuotaRows();
    for (const args of [
      ['set', 'team-a', '--model', '', '--nominal', '1'], // empty name
      ['set', 'team-a', '--model', '_-', '--nominal', '1'], // no word in it
      ['set', 'team-a', '--model', 'x'.repeat(65), '--nominal', '1'],
      ['set', 'team-a', '--model', 'H100;reboot', '--nominal', '1'],
      ['set', 'team-a', '--model', 'H100', '--nominal=-1'],
      ['set', 'team-a', '--model', 'H100', '--nominal', '9'], // past org's 8 H100
      ['set', 'org', '--model', 'H100', '--nominal', '3'], // below team-a's 4 H100
      ['set', 'team-a', '--model', 'V100', '--borrow', '2'], // no nominal to borrow beyond
      ['set', 'team-a', '--model', 'H100', '--borrow', '1', '--nominal', 'none'], // a borrowing limit alone
      ['set', 'team-a', '--model', 'V100', '--budget', '10'], // no period
      ['create', 'team-c', '--parent', 'org', '--model', 'H100', '--nominal', '5'], // 5 + 4 > 8
    ]) {
      const r = await acct(...args);
      expect(r.stdout, args.join(' ')).toMatch(/INVALID_INPUT/);
      expect(r.json<{ error: ErrorBody }>().error.code, args.join(' ')).toBe('INVALID_INPUT');
      expect(r.json<{ error: ErrorBody }>().error.hint, args.join(' ')).toBeTruthy();
    }
    expect(stored()).toEqual(before);
    expect(modelQuotaRows()).toEqual(quotasBefore);
    // Cleared: nothing left of it, so it is gone.
    const cleared = await acct(
      'set',
      'team-a',
      '--model',
      'H100',
      '--nominal',
      'none',
      '--borrow',
      'any',
      '--budget',
      'none',
    );
    expect(
      cleared
        .json<{ account: { model_quotas: Array<{ model: string }> } }>()
        .account.model_quotas.map((m) => m.model),
    ).toEqual(['A100']);
  });

  it('--max-priority sets, shows and clears the account’s highest priority; out of range is refused', async () => {
    await acct('create', 'team-a', '--max-priority', '20');
    expect(
      (await acct('show', 'team-a')).json<{ account: { max_priority: number | null } }>().account
        .max_priority,
    ).toBe(20);
    for (const bad of ['101', '-1', 'high'])
      expect(
        (await acct('set', 'team-a', `--max-priority=${bad}`)).json<{ error: ErrorBody }>().error.code,
      ).toBe('INVALID_INPUT');
    const cleared = await acct('set', 'team-a', '--max-priority', 'none');
    expect(cleared.json<{ account: { max_priority: number | null } }>().account.max_priority).toBeNull();
  });

  it('--preemptible yes|no makes every task of the account preemptible while it borrows, or leaves it to the specs', async () => {
    const made = await acct('create', 'batch', '--preemptible', 'yes');
    expect(made.json<{ account: { preemptible: boolean } }>().account.preemptible).toBe(true);
    const listed = (await acct('list')).json<{ accounts: Array<{ name: string; preemptible: boolean }> }>();
    expect(listed.accounts.find((a) => a.name === 'batch')?.preemptible).toBe(true);
    expect(listed.accounts.find((a) => a.name === 'default')?.preemptible).toBe(false);
    for (const bad of ['maybe', '1', 'true'])
      expect(
        (await acct('set', 'batch', `--preemptible=${bad}`)).json<{ error: ErrorBody }>().error.code,
      ).toBe('INVALID_INPUT');
    // A refused flag changed nothing.
    expect(
      (await acct('show', 'batch')).json<{ account: { preemptible: boolean } }>().account.preemptible,
    ).toBe(true);
    const off = await acct('set', 'batch', '--preemptible', 'no');
    expect(off.json<{ account: { preemptible: boolean } }>().account.preemptible).toBe(false);
    // Untouched by a set that does not name it.
    await acct('set', 'batch', '--weight', '2');
    expect(
      (await acct('show', 'batch')).json<{ account: { preemptible: boolean } }>().account.preemptible,
    ).toBe(false);
  });

  it('a description reaches the terminal escaped: no control character of it is printed', async () => {
    await acct('create', 'team-a', '--description', 'ok\u001b[2J\u0007 \u202etxt.exe');
    const human = await runCli(account, ['list', '--data-dir', dataDir]);
    expect(human.stdout).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f\u202e]/);
    expect(human.stdout).toContain('team-a');
  });
});
