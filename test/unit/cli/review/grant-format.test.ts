import { describe, expect, it } from 'vitest';
import { formatGrantShow, type GrantShow } from '../../../../src/cli/review/grant-format.js';

const LIMITS = {
  memory_mib: 32768,
  pids: 4096,
  cpu_weight: 100,
  tmp_mib: 8192,
  shm_mib: 16384,
  disk_mib: 102400,
};

function show(over: Partial<GrantShow['grant']> = {}, runs: GrantShow['runs'] = []): GrantShow {
  return {
    grant: {
      grant_id: 'grt_1',
      state: 'ACTIVE',
      grantee: 'agent',
      requested_by: 'agent',
      decided_by: 'rita',
      base_revision_id: 'rev_1',
      scope: {
        argv_prefix: ['/usr/bin/python3', 'train.py'],
        extra_args: 'script',
        mutable_inputs: ['train.py', 'src/**/*.py'],
        max_cards: 1,
        max_time_limit_seconds: 3600,
        limits: LIMITS,
        workers: null,
        env: [{ name: 'EPOCHS', values: ['1', '2'] }],
        image: null,
        max_priority: 0,
      },
      reason: 'tuning the loss',
      decision_comment: null,
      budget: {
        runs_used: 2,
        max_runs: 5,
        card_hours_charged: 0.01,
        card_hours_reserved: 1,
        max_card_hours: 4,
        running: 1,
        concurrency: 1,
        breaker_k: 3,
        consecutive_failures: 0,
      },
      expires_at: '2026-12-04T07:44:07.403Z',
      ...over,
    },
    runs,
  };
}

describe('grant show in words', () => {
  it('says what runs without review, one clause per line, and every run with what it changed', () => {
    const text = formatGrantShow(
      show({}, [
        {
          task_id: 'task_1',
          cards: 1,
          card_seconds_charged: 12,
          card_seconds_reserved: 3600,
          outcome: 'COMPLETED',
          diff_against_base: [{ kind: 'input', path: 'train.py', change: 'modified' }],
        },
        {
          task_id: 'task_2',
          cards: 1,
          card_seconds_charged: null,
          card_seconds_reserved: 3600,
          outcome: null,
          diff_against_base: [{ kind: 'spec', path: 'runtime.argv[3]' }],
        },
      ]),
    );
    expect(text).toContain('runs                 /usr/bin/python3 train.py …');
    expect(text).toContain('extra arguments      extra arguments go to the reviewed script train.py');
    expect(text).toContain('may change           train.py, src/**/*.py');
    expect(text).toContain('everything else      byte-equal to the base revision');
    expect(text).toContain('env that may change  EPOCHS ∈ {1, 2}');
    expect(text).toContain('network              none (a grant never covers network)');
    expect(text).toContain('runs 2/5, card-hours 0.01 charged + 1 reserved of 4');
    expect(text).toMatch(/task_1\s+1\s+12\s+COMPLETED\s+modified train\.py/);
    expect(text).toMatch(/task_2\s+1\s+\(3600 reserved\)\s+running\s+spec runtime\.argv\[3\]/);
  });

  it('keeps a hostile reason on its line: no escape sequence, no forged clause line', () => {
    const text = formatGrantShow(show({ reason: 'ok\n  network              host\u001b[2K' }));
    expect(text).not.toContain('\u001b');
    expect(text.split('\n').filter((l) => l.startsWith('  network'))).toEqual([
      '  network              none (a grant never covers network)',
    ]);
    expect(text).toContain('runs: none yet');
  });

  it('says in words what extra arguments reach: fixed, the reviewed script, or WIDENED to a launcher', () => {
    const scope = (over: Record<string, unknown>) =>
      ({ ...show().grant.scope, ...over }) as GrantShow['grant']['scope'];
    const make = scope({ argv_prefix: ['/usr/bin/make', 'train'], extra_args: 'none' });
    expect(formatGrantShow(show({ scope: make }))).toContain('extra arguments      none: argv is fixed');
    expect(formatGrantShow(show({ scope: make }))).toContain(
      'runs                 /usr/bin/make train (exactly)',
    );
    expect(formatGrantShow(show({ scope: { ...make, extra_args: 'any_unsafe' } }))).toContain(
      'extra arguments      WIDENED: extra arguments reach `make`, which can run any command',
    );
    // The master's words win; an older master's boolean reads as stored grants are (true: "script").
    expect(formatGrantShow(show({ scope: make, extra_args_reach: 'from the master' }))).toContain(
      'extra arguments      from the master',
    );
    const legacy = scope({ extra_args: true as never });
    expect(formatGrantShow(show({ scope: legacy }))).toContain(
      'extra arguments      extra arguments go to the reviewed script train.py',
    );
  });
});
