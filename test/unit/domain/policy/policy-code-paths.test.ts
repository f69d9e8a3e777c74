import { describe, expect, it } from 'vitest';
import { type PolicyInput, PolicySchema } from '../../../../src/contracts/policy.js';
import { type TaskSpec, TaskSpecSchema } from '../../../../src/contracts/task-spec.js';
import { ENV_CONTROL, envControlOf } from '../../../../src/domain/policy/env-control.js';
import {
  evaluatePolicy,
  type Finding,
  isConfirmable,
  type PolicyFacts,
} from '../../../../src/domain/policy/evaluate.js';
import { IMPLICIT_CODE, implicitCodeOf } from '../../../../src/domain/policy/implicit-code.js';
import { digestsToInspect } from '../../../../src/domain/policy/inputs.js';
import { runArgv } from '../../../../src/domain/policy/run-argv.js';
import { inspectText, MAX_INSPECT_FILE_BYTES } from '../../../../src/domain/policy/text-inspection.js';
import { validSpec } from '../../../support/spec.js';

/**
 * docs/security.md "Code the reviewer did not read": every path from the spec to code outside the reviewed bytes is a finding —
 * interpreter-control env, an input script that is really an option (`-c`), files an interpreter loads
 * on its own, text that displays other than it runs — and each policy key that allows one turns the
 * error into a warning the reviewer still sees.
 */

const PY = '/usr/bin/python3';
const codes = (fs: Finding[]) => fs.map((f) => `${f.severity}:${f.code}`).sort();
const parse = (s: unknown): TaskSpec => TaskSpecSchema.parse(s);
const policyOf = (p: PolicyInput = {}) =>
  PolicySchema.parse({
    executables: [{ path: '/bin/sh' }],
    scripts: [{ interpreter: PY, script_from_inputs: true }],
    ...p,
  });
const sha = (c: string) => c.repeat(64);
const input = (path: string, c = 'a', size = 10) => ({ path, sha256: sha(c), size });
const pySpec = (argv: string[], inputs = [input('main.py')], env?: Record<string, string>) =>
  parse(validSpec({ runtime: { kind: 'process', argv, ...(env ? { env } : {}) }, inputs }));
const stored = (spec: TaskSpec): PolicyFacts => ({
  fileDigests: {},
  storedBlobs: Object.fromEntries((spec.inputs ?? []).map((i) => [i.sha256, i.size])),
});
const errorsOf = (fs: Finding[]) => codes(fs.filter((f) => f.severity === 'error'));

describe('env that controls an interpreter or the loader', () => {
  const withEnv = (env: Record<string, string>) =>
    parse(validSpec({ runtime: { kind: 'process', argv: ['/bin/sh', '-c', 'true'], env } }));

  it('is an error naming the variable and its family, with the policy key in the hint', () => {
    for (const [name, family] of [
      ['PYTHONWARNINGS', 'python'],
      ['BROWSER', 'program to run'],
      ['PYTHONSTARTUP', 'python'],
      ['PYTHONPATH', 'python'],
      ['BASH_ENV', 'shell'],
      ['ENV', 'shell'],
      ['SHELLOPTS', 'shell'],
      ['PS4', 'shell'],
      ['BASH_FUNC_echo', 'shell'],
      ['PERL5OPT', 'perl'],
      ['NODE_OPTIONS', 'node'],
      ['RUBYOPT', 'ruby'],
      ['JAVA_TOOL_OPTIONS', 'java'],
      ['LD_DEBUG_OUTPUT', 'dynamic loader'],
      ['LD_PROFILE_OUTPUT', 'dynamic loader'],
      ['GCONV_PATH', 'dynamic loader'],
      ['GIT_CONFIG_COUNT', 'git'],
    ] as const) {
      const fs = evaluatePolicy(withEnv({ [name]: 'x' }), policyOf(), { fileDigests: {} });
      expect(codes(fs), name).toEqual(['error:ENV_CONTROL']);
      expect(fs[0]?.path).toBe(`runtime.env.${name}`);
      expect(fs[0]?.message).toContain(`"${name}"`);
      expect(fs[0]?.message).toContain(family);
      expect(fs[0]?.hint).toContain('policy.allowed_control_env');
    }
  });

  it('ordinary names are not in the table', () => {
    for (const name of [
      'PYTHONUNBUFFERED',
      'OMP_NUM_THREADS',
      'HF_HUB_OFFLINE',
      'NCCL_DEBUG',
      'LANG',
      'PATHX',
    ])
      expect(envControlOf(name), name).toBeUndefined();
    for (const e of ENV_CONTROL) expect(e.why.length, e.name).toBeGreaterThan(10);
  });

  it('allowed by name: a warning the reviewer still sees; the three loader names stay refused', () => {
    const open = policyOf({ allowed_control_env: ['PYTHONPATH', 'LD_PRELOAD'] });
    const fs = evaluatePolicy(withEnv({ PYTHONPATH: 'lib', LD_PRELOAD: 'x.so', PERL5OPT: '-d' }), open, {
      fileDigests: {},
    });
    expect(codes(fs)).toEqual(['error:ENV_CONTROL', 'error:ENV_REFUSED', 'warning:ENV_CONTROL_ALLOWED']);
    expect(fs.find((f) => f.code === 'ENV_CONTROL')?.path).toBe('runtime.env.PERL5OPT');
  });
});

describe('script_from_inputs means exactly one input file', () => {
  it('an input named like an option is refused when the spec is parsed', () => {
    for (const path of ['-c', '-m', '-', 'src/-x.py'])
      expect(TaskSpecSchema.safeParse(validSpec({ inputs: [input(path)] })).success, path).toBe(false);
  });

  it('inline code, a module or stdin for an interpreter allowed only for input scripts is an error', () => {
    for (const argv of [
      [PY, '-c', 'import os; os.system("id")'],
      [PY, '-m', 'http.server'],
      [PY, '-'],
      [PY, '-I', 'main.py'],
      [PY, 'other.py'],
    ]) {
      const spec = pySpec(argv);
      const fs = evaluatePolicy(spec, policyOf(), stored(spec));
      expect(errorsOf(fs), argv.join(' ')).toEqual(['error:SCRIPT_NOT_AN_INPUT']);
      expect(fs.find((f) => f.code === 'SCRIPT_NOT_AN_INPUT')?.message).toContain(JSON.stringify(argv[1]));
    }
    const bare = pySpec([PY]);
    expect(errorsOf(evaluatePolicy(bare, policyOf(), stored(bare)))).toEqual([
      'error:EXECUTABLE_NOT_ALLOWED',
    ]);
  });

  it('an interpreter the policy also allows as an executable may still take -c (the code is in the spec)', () => {
    const spec = pySpec([PY, '-c', 'print(1)']);
    const fs = evaluatePolicy(spec, policyOf({ executables: [{ path: PY }] }), stored(spec));
    expect(errorsOf(fs)).toEqual([]);
  });

  it('runs Python isolated from PYTHON* env and the user site, and the warning shows the argv that runs', () => {
    const spec = pySpec([PY, './main.py', '--epochs', '1']);
    expect(runArgv(spec, policyOf())).toEqual([PY, '-E', '-s', './main.py', '--epochs', '1']);
    const fs = evaluatePolicy(spec, policyOf(), stored(spec));
    expect(codes(fs)).toEqual(['warning:SCRIPT_FROM_INPUTS']);
    expect(fs[0]?.message).toContain('"/usr/bin/python3", "-E", "-s", "./main.py", "--epochs", "1"');
    const loose = policyOf({ scripts: [{ interpreter: PY, script_from_inputs: true, isolated: false }] });
    expect(runArgv(spec, loose)).toEqual([PY, './main.py', '--epochs', '1']);
    // Not a script from the inputs: the argv runs as written.
    expect(runArgv(pySpec(['/bin/sh', '-c', 'true']), policyOf())).toEqual(['/bin/sh', '-c', 'true']);
    const bash = pySpec(['/bin/bash', 'main.py']);
    expect(
      runArgv(bash, policyOf({ scripts: [{ interpreter: '/bin/bash', script_from_inputs: true }] })),
    ).toEqual(['/bin/bash', '-p', 'main.py']);
    const perl = pySpec(['/usr/bin/perl', 'main.py']);
    expect(
      runArgv(perl, policyOf({ scripts: [{ interpreter: '/usr/bin/perl', script_from_inputs: true }] })),
    ).toEqual(['/usr/bin/perl', 'main.py']);
  });

  it('a script that is not UTF-8 text is an error', () => {
    const spec = pySpec([PY, 'main.py']);
    const binary = inspectText('main.py', Uint8Array.from([0x61, 0x00, 0xff]));
    const fs = evaluatePolicy(spec, policyOf(), { ...stored(spec), inputText: { [sha('a')]: binary } });
    expect(errorsOf(fs)).toEqual(['error:SCRIPT_NOT_TEXT']);
  });
});

describe('implicit code among the inputs', () => {
  const cases = [
    '__pycache__/helper.cpython-311.pyc',
    'pkg/__pycache__/x.txt',
    'helper.pyc',
    'evil.pth',
    'sitecustomize.py',
    'lib/usercustomize.py',
    '.local/lib/python3.11/site-packages/x.py',
    '.bashrc',
    '.gitconfig',
    'repo/.git/hooks/post-checkout',
  ];

  it('each well-known file is an error naming the path, quoted; ordinary sources are not', () => {
    for (const path of cases) {
      const spec = pySpec([PY, 'main.py'], [input('main.py'), input(path, 'b')]);
      const fs = evaluatePolicy(spec, policyOf(), stored(spec));
      expect(errorsOf(fs), path).toEqual(['error:IMPLICIT_CODE']);
      const f = fs.find((x) => x.code === 'IMPLICIT_CODE')!;
      expect(f.message).toContain(JSON.stringify(path));
      expect(f.path).toBe('inputs[1].path');
      expect(f.hint).toContain('policy.allow_implicit_code');
    }
    for (const path of ['main.py', 'pycache.py', 'site.py', 'local/lib/python3/x.py', 'docs/bashrc.md'])
      expect(implicitCodeOf(path), path).toBeUndefined();
    expect(IMPLICIT_CODE.length).toBeGreaterThan(3);
  });

  it('allow_implicit_code turns the error into a warning', () => {
    const spec = pySpec([PY, 'main.py'], [input('main.py'), input('evil.pth', 'b')]);
    const fs = evaluatePolicy(spec, policyOf({ allow_implicit_code: true }), stored(spec));
    expect(codes(fs)).toEqual(['warning:IMPLICIT_CODE_ALLOWED', 'warning:SCRIPT_FROM_INPUTS']);
  });
});

describe('text that displays other than it runs', () => {
  const text = (s: string) => new TextEncoder().encode(s);

  it('is a warning naming the file and line; files not inspected are named too', () => {
    const spec = pySpec([PY, 'main.py'], [input('main.py'), input('lib.py', 'b'), input('big.bin', 'c')]);
    const facts: PolicyFacts = {
      ...stored(spec),
      inputText: {
        [sha('a')]: inspectText('main.py', text('import lib\n')),
        [sha('b')]: inspectText('lib.py', text('ok = 1\nx = 2\r# hidden\n')),
      },
    };
    const fs = evaluatePolicy(spec, policyOf(), facts);
    expect(codes(fs)).toEqual([
      'warning:INPUTS_NOT_INSPECTED',
      'warning:SCRIPT_FROM_INPUTS',
      'warning:TEXT_DISPLAYS_DIFFERENTLY',
    ]);
    const f = fs.find((x) => x.code === 'TEXT_DISPLAYS_DIFFERENTLY')!;
    expect(f.message).toContain('"lib.py"');
    expect(f.message).toContain('line 2');
    expect(fs.find((x) => x.code === 'INPUTS_NOT_INSPECTED')?.message).toContain('"big.bin"');
    expect(isConfirmable(fs)).toBe(true);
  });

  it('inspects at most MAX_INSPECT_FILE_BYTES per file, each digest once', () => {
    const spec = pySpec([PY, 'main.py'], [input('main.py'), input('copy.py'), input('big.bin', 'c')]);
    expect(digestsToInspect(spec, { [sha('a')]: 10, [sha('c')]: MAX_INSPECT_FILE_BYTES + 1 })).toEqual([
      sha('a'),
    ]);
  });
});

describe('submitter values are quoted in every finding message', () => {
  const payload = 'x\nVERIFIED SAFE by gpu-broker policy.\u202e';
  /** The message with every JSON string literal taken out: what the server itself says. */
  const unquoted = (m: string) => m.replace(/"(?:[^"\\]|\\.)*"/g, '""');

  it('argv, executable, script, env and image values never appear outside quotes', () => {
    const specs = [
      pySpec([PY, payload]),
      pySpec([payload]),
      pySpec([`/usr/bin/${payload}`, 'a']),
      pySpec([PY, 'main.py'], [input('main.py'), input('VERIFIED SAFE by gpu-broker policy.pth', 'b')]),
      parse(
        validSpec({
          runtime: { kind: 'container', image: 'VERIFIED-SAFE-by-gpu-broker-policy', argv: ['a'] },
        }),
      ),
    ];
    for (const spec of specs) {
      const fs = evaluatePolicy(spec, policyOf(), stored(spec));
      expect(fs.length).toBeGreaterThan(0);
      for (const f of fs) {
        for (const text of [f.message, f.hint]) {
          expect(unquoted(text)).not.toMatch(/VERIFIED.SAFE/);
          expect(text).not.toMatch(/[\n\u202e]/);
        }
      }
    }
  });
});
