import { describe, expect, it } from 'vitest';
import { PolicySchema } from '../../../../src/contracts/policy.js';
import { type TaskSpec, TaskSpecSchema } from '../../../../src/contracts/task-spec.js';
import { evaluatePolicy } from '../../../../src/domain/policy/evaluate.js';
import {
  IMPLICIT_CODE,
  implicitCodeIn,
  implicitCodeOf,
} from '../../../../src/domain/policy/implicit-code.js';
import { PYTHON_STDLIB_MODULES } from '../../../../src/domain/policy/python-stdlib.js';
import { validSpec } from '../../../support/spec.js';

/**
 * The implicit-code table (docs/security.md "Code the reviewer did not read"), one test per row: each case is an input set,
 * the argv, and the one input the row must name. Then variants an adversary would try (other suffixes,
 * other loaders) and look-alikes that must stay clean.
 */

const PY = '/usr/bin/python3';
const NFC = 'caf\u00e9.py';
const NFD = 'cafe\u0301.py';

interface Case {
  paths: string[];
  argv?: string[];
  flagged: string;
  detail?: RegExp;
}

/** Each row's pattern → cases that must hit exactly that row on exactly `flagged`. */
const CASES: Record<string, Case[]> = {
  '*.pyc, *.pyo': [{ paths: ['main.py', 'helper.pyc'], flagged: 'helper.pyc' }],
  '__pycache__/': [{ paths: ['main.py', 'pkg/__pycache__/x.txt'], flagged: 'pkg/__pycache__/x.txt' }],
  '*.pth': [{ paths: ['main.py', 'evil.pth'], flagged: 'evil.pth' }],
  'sitecustomize.py, usercustomize.py': [
    { paths: ['main.py', 'sitecustomize.py'], flagged: 'sitecustomize.py' },
    { paths: ['main.py', 'lib/usercustomize.py'], flagged: 'lib/usercustomize.py' },
  ],
  '.local/': [
    {
      paths: ['main.py', '.local/lib/python3.11/site-packages/x.py'],
      flagged: '.local/lib/python3.11/site-packages/x.py',
    },
    {
      paths: ['main.py', '.local/share/jupyter/kernels/k/kernel.json'],
      flagged: '.local/share/jupyter/kernels/k/kernel.json',
    },
    { paths: ['main.py', '.local/bin/nvidia-smi'], flagged: '.local/bin/nvidia-smi' },
  ],
  '.pdbrc': [
    { paths: ['main.py', '.pdbrc'], flagged: '.pdbrc' },
    { paths: ['main.py', 'work/.pdbrc'], flagged: 'work/.pdbrc' },
  ],
  'matplotlibrc, .config/matplotlib/, .matplotlib/': [
    { paths: ['main.py', 'matplotlibrc'], flagged: 'matplotlibrc' },
    { paths: ['main.py', '.config/matplotlib/matplotlibrc'], flagged: '.config/matplotlib/matplotlibrc' },
    { paths: ['main.py', '.matplotlib/matplotlibrc'], flagged: '.matplotlib/matplotlibrc' },
  ],
  '.ipython/, .jupyter/': [
    {
      paths: ['main.py', '.ipython/profile_default/startup/00.py'],
      flagged: '.ipython/profile_default/startup/00.py',
    },
    {
      paths: ['main.py', '.jupyter/jupyter_nbconvert_config.py'],
      flagged: '.jupyter/jupyter_nbconvert_config.py',
    },
  ],
  '.cache/, .triton/, .nv/': [
    {
      paths: ['main.py', '.cache/torch/hub/o_r_main/hubconf.py'],
      flagged: '.cache/torch/hub/o_r_main/hubconf.py',
    },
    {
      paths: ['main.py', '.cache/huggingface/modules/transformers_modules/m/modeling.py'],
      flagged: '.cache/huggingface/modules/transformers_modules/m/modeling.py',
    },
    {
      paths: ['main.py', '.triton/cache/abc/__triton_launcher.so'],
      flagged: '.triton/cache/abc/__triton_launcher.so',
    },
    { paths: ['main.py', '.nv/ComputeCache/index'], flagged: '.nv/ComputeCache/index' },
  ],
  '.nccl.conf': [{ paths: ['main.py', '.nccl.conf'], flagged: '.nccl.conf' }],
  '.cupy/, .pyxbld/': [
    { paths: ['main.py', '.cupy/kernel_cache/0123abcd.cubin'], flagged: '.cupy/kernel_cache/0123abcd.cubin' },
    {
      paths: ['main.py', '.pyxbld/lib.linux-x86_64-cpython-311/fast.cpython-311-x86_64-linux-gnu.so'],
      flagged: '.pyxbld/lib.linux-x86_64-cpython-311/fast.cpython-311-x86_64-linux-gnu.so',
    },
  ],
  '.numba_config.yaml': [{ paths: ['main.py', '.numba_config.yaml'], flagged: '.numba_config.yaml' }],
  '.profile, .bashrc, .bash_profile, .bash_login, .bash_logout, .zshenv, .zprofile, .zshrc': [
    { paths: ['main.py', '.bashrc'], flagged: '.bashrc' },
  ],
  '.gitconfig, .config/git/, */.git/config, */.git/hooks/': [
    { paths: ['main.py', '.gitconfig'], flagged: '.gitconfig' },
    { paths: ['main.py', 'repo/.git/hooks/post-checkout'], flagged: 'repo/.git/hooks/post-checkout' },
  ],
  '.config/': [{ paths: ['main.py', '.config/pip/pip.conf'], flagged: '.config/pip/pip.conf' }],
  '.perldb': [{ paths: ['main.pl', '.perldb'], flagged: '.perldb' }],
  '.irbrc, .pryrc': [
    { paths: ['main.rb', '.irbrc'], flagged: '.irbrc' },
    { paths: ['main.rb', '.pryrc'], flagged: '.pryrc' },
  ],
  '.Rprofile, .Renviron, .RData': [
    { paths: ['main.R', '.Rprofile'], flagged: '.Rprofile' },
    { paths: ['main.R', '.Renviron'], flagged: '.Renviron' },
    { paths: ['main.R', '.RData'], flagged: '.RData' },
  ],
  'a module beside another of the same name (foo.*.so or foo/__init__.py beside foo.py)': [
    // Every suffix importlib.machinery.EXTENSION_SUFFIXES holds on some platform.
    ...[
      'helper.cpython-311-x86_64-linux-gnu.so',
      'helper.cpython-313t-aarch64-linux-gnu.so',
      'helper.cpython-312d-x86_64-linux-gnu.so',
      'helper.cpython-311-darwin.so',
      'helper.abi3.so',
      'helper.so',
      'helper.cp311-win_amd64.pyd',
      'helper.pyd',
    ].map((so) => ({
      paths: ['main.py', 'helper.py', so],
      flagged: so,
      detail: /runs instead of "helper\.py"/,
    })),
    {
      paths: ['main.py', 'helper.py', 'helper/__init__.py'],
      flagged: 'helper/__init__.py',
      detail: /"helper\.py"/,
    },
    {
      paths: ['main.py', 'helper.so', 'helper/__init__.py'],
      flagged: 'helper/__init__.py',
      detail: /"helper\.so"/,
    },
    // A package's own __init__: the extension wins over the source, inside a package too.
    {
      paths: ['main.py', 'pkg/__init__.py', 'pkg/__init__.abi3.so'],
      flagged: 'pkg/__init__.abi3.so',
      detail: /"pkg\/__init__\.py"/,
    },
    { paths: ['main.py', 'src/model.py', 'src/model.so'], flagged: 'src/model.so' },
    {
      paths: ['main.py', 'helper.py', 'helper.pyw', 'helper.so'],
      flagged: 'helper.so',
      detail: /"helper\.py", "helper\.pyw"/,
    },
  ],
  'a standard-library name (json.py, random/__init__.py) where Python looks first': [
    { paths: ['main.py', 'json.py'], flagged: 'json.py', detail: /standard library's "json"/ },
    { paths: ['main.py', 'random/__init__.py'], flagged: 'random/__init__.py' },
    { paths: ['main.py', 'os.py'], flagged: 'os.py' },
    { paths: ['main.py', '_strptime.py'], flagged: '_strptime.py' },
    { paths: ['main.py', 'logging.abi3.so'], flagged: 'logging.abi3.so' },
    // Beside a script argv names, inside a package.
    {
      paths: ['pkg/__init__.py', 'pkg/train.py', 'pkg/json.py'],
      argv: [PY, 'pkg/train.py'],
      flagged: 'pkg/json.py',
    },
    {
      paths: ['pkg/__init__.py', 'pkg/train.py', 'pkg/json.py'],
      argv: [PY, './pkg/train.py'],
      flagged: 'pkg/json.py',
    },
    // The same script spelled as Python still finds it (python3 in policy.executables runs any spelling):
    // absolute under the task dir, `.` and empty segments; sys.path[0] is pkg/ all the same.
    ...['/task/pkg/train.py', 'pkg/./train.py', './/pkg//train.py', 'pkg/../pkg/train.py'].map((script) => ({
      paths: ['pkg/__init__.py', 'pkg/train.py', 'pkg/json.py'],
      argv: [PY, script],
      flagged: 'pkg/json.py',
    })),
    // A directory that is not a regular package: a script there may be run by a launcher.
    {
      paths: ['run.sh', 'scripts/train.py', 'scripts/typing.py'],
      argv: ['/bin/sh', 'run.sh'],
      flagged: 'scripts/typing.py',
    },
  ],
  'two paths that differ only by Unicode normalisation (NFC, NFD, NFKC)': [
    { paths: [NFC, NFD], flagged: NFC, detail: /shows like/ },
    { paths: ['main.py', 'data/\ufb01le.txt', 'data/file.txt'], flagged: 'data/\ufb01le.txt' },
    { paths: [`dir/${NFC}`, `dir/${NFD}`], flagged: `dir/${NFC}` },
  ],
};

const hitsOf = (c: Case) => implicitCodeIn(c.paths, c.argv ?? [PY, c.paths[0]!]);

describe('the implicit-code table, one test per row', () => {
  it('every row has cases, and every case names the row that matches it', () => {
    expect(Object.keys(CASES).sort()).toEqual(IMPLICIT_CODE.map((e) => e.pattern).sort());
  });

  for (const entry of IMPLICIT_CODE)
    it(`$entry.scoperow: $entry.pattern`, () => {
      for (const c of CASES[entry.pattern] ?? []) {
        const hits = hitsOf(c);
        const label = `$c.paths.join(' ')→ $c.flagged`;
        const hit = hits.find((h) => c.paths[h.index] === c.flagged);
        expect(hit?.entry.pattern, label).toBe(entry.pattern);
        if (c.detail) expect(hit?.detail, label).toMatch(c.detail);
        expect(entry.why.length).toBeGreaterThan(10);
      }
    });
});

describe('what stays clean', () => {
  const clean: Case[] = [
    { paths: ['main.py', 'helper.py', 'pycache.py', 'site.py.txt', 'docs/bashrc.md'], flagged: '' },
    { paths: ['main.py', 'local/lib/python3/x.py', 'config/git/x', 'cache/x'], flagged: '' },
    // An extension module alone is not a shadow (it is binary: a person reads the review note, no agent approves it).
    { paths: ['main.py', 'kernels.cpython-311-x86_64-linux-gnu.so'], flagged: '' },
    // A shared library Python does not import by module name.
    { paths: ['main.py', 'helper.py', 'libhelper.so.1', 'helper.so.1'], flagged: '' },
    // Standard-library names inside a regular package nobody runs a script from: submodules.
    { paths: ['main.py', 'utils/__init__.py', 'utils/logging.py', 'utils/json/__init__.py'], flagged: '' },
    // A directory without __init__ named like a module loses to the standard library (a namespace portion).
    { paths: ['main.py', 'code/readme.md', 'json/data.json'], flagged: '' },
    // Paths that only look alike to a person but differ under NFKC are not this row's (case, homoglyphs).
    { paths: ['Main.py', 'main.py', 'm\u0430in.py'], flagged: '' },
    { paths: ['main.py', 'conftest.py', '.pythonrc.py', 'node_modules/x/index.js'], flagged: '' },
  ];
  it.each(clean)('$paths', (c) => {
    expect(hitsOf(c).map((h) => c.paths[h.index])).toEqual([]);
  });

  it('the standard-library list is the union of 3.10–3.13 and holds the well-known names', () => {
    for (const name of ['json', 'random', 'os', 'typing', 'asyncore', '_pydecimal', 'tomllib', '_pyrepl'])
      expect(PYTHON_STDLIB_MODULES.has(name), name).toBe(true);
    for (const name of ['numpy', 'torch', 'test', 'utils', 'main'])
      expect(PYTHON_STDLIB_MODULES.has(name), name).toBe(false);
    expect(PYTHON_STDLIB_MODULES.size).toBeGreaterThan(300);
  });

  it('implicitCodeOf (what propose --dir leaves out) answers path rows only', () => {
    expect(implicitCodeOf('.pdbrc')?.pattern).toBe('.pdbrc');
    expect(implicitCodeOf('json.py')).toBeUndefined();
    expect(implicitCodeOf('helper.so')).toBeUndefined();
  });
});

describe('through the policy', () => {
  const sha = (c: string) => c.repeat(64);
  const policy = PolicySchema.parse({ scripts: [{ interpreter: PY, script_from_inputs: true }] });
  const spec = (paths: string[]): TaskSpec =>
    TaskSpecSchema.parse(
      validSpec({
        runtime: { kind: 'process', argv: [PY, 'main.py'] },
        inputs: paths.map((path, i) => ({ path, sha256: sha('abcdef0123456789'[i]!), size: 1 })),
      }),
    );
  const facts = (s: TaskSpec) => ({
    fileDigests: {},
    storedBlobs: Object.fromEntries((s.inputs ?? []).map((i) => [i.sha256, i.size])),
  });

  it('a set row is an IMPLICIT_CODE error naming both inputs, quoted, with a rename hint', () => {
    const s = spec(['main.py', 'helper.py', 'helper.abi3.so', 'json.py']);
    const fs = evaluatePolicy(s, policy, facts(s)).filter((f) => f.severity === 'error');
    expect(fs.map((f) => [f.code, f.path])).toEqual([
      ['IMPLICIT_CODE', 'inputs[2].path'],
      ['IMPLICIT_CODE', 'inputs[3].path'],
    ]);
    expect(fs[0]?.message).toMatch(/"helper.abi3.so" is code that python loads.*runs instead of "helper.py"/);
    expect(fs[1]?.message).toContain('"json.py"');
    expect(fs[0]?.hint).toContain('Rename');
  });

  it('allow_implicit_code turns it into a warning the reviewer sees', () => {
    const s = spec(['main.py', NFC, NFD]);
    const open = PolicySchema.parse({ ...policy, allow_implicit_code: true });
    const fs = evaluatePolicy(s, open, facts(s)).filter((f) => f.code.startsWith('IMPLICIT'));
    expect(fs.map((f) => [f.severity, f.code])).toEqual([
      ['warning', 'IMPLICIT_CODE_ALLOWED'],
      ['warning', 'IMPLICIT_CODE_ALLOWED'],
    ]);
    expect(fs[0]?.message).toContain('shows like');
    expect(fs.map((f) => f.path)).toEqual(['inputs[1].path', 'inputs[2].path']);
  });

  // Its time (under 50 ms a call) is measured by `npm run bench` (section test-bounds), not here.
  it('goes over 1000 inputs, none loaded on its own, and finds none', () => {
    const paths = Array.from({ length: 1000 }, (_, i) => `src/m$i % 50/mod_${i}.py`);
    const argv = [PY, 'src/m0/mod_0.py'];
    expect(implicitCodeIn(paths, argv)).toEqual([]);
  });
});

describe('attacked again (fresh-eyes review)', () => {
  const sha = (c: string) => c.repeat(64);
  const policy = PolicySchema.parse({ scripts: [{ interpreter: PY, script_from_inputs: true }] });
  const errorsOf = (argv: string[], paths: string[]) => {
    const s = TaskSpecSchema.parse(
      validSpec({
        runtime: { kind: 'process', argv },
        inputs: paths.map((path, i) => ({ path, sha256: sha('abcdef0123456789'[i]!), size: 1 })),
      }),
    );
    const facts = {
      fileDigests: {},
      storedBlobs: Object.fromEntries((s.inputs ?? []).map((i) => [i.sha256, i.size])),
    };
    return evaluatePolicy(s, policy, facts).filter((f) => f.severity === 'error');
  };

  // Characters every viewer draws as nothing that NFKC keeps and the hidden-character class misses.
  it.each([
    ['soft hyphen', '\u00ad'],
    ['combining grapheme joiner', '\u034f'],
    ['variation selector 16', '\ufe0f'],
    ['Hangul filler', '\u3164'],
    ['Mongolian vowel separator', '\u180e'],
    ['tag letter', '\u{e0061}'],
  ])('two paths that differ by a %s are shown alike: a finding, or refused', (_name, c) => {
    const twin = `tra${c}in.py`;
    const spec = TaskSpecSchema.safeParse(
      validSpec({
        runtime: { kind: 'process', argv: [PY, 'train.py'] },
        inputs: [
          { path: 'train.py', sha256: sha('a'), size: 1 },
          { path: twin, sha256: sha('b'), size: 1 },
        ],
      }),
    );
    if (!spec.success) return;
    expect(implicitCodeIn(['train.py', twin], [PY, 'train.py']).length).toBeGreaterThan(0);
  });

  it.each([['sub//train.py'], ['sub/./train.py'], ['./sub/train.py']])(
    'a standard-library name beside a script argv names as %s (a package dir) is found',
    (script) => {
      const errors = errorsOf([PY, script], ['sub/__init__.py', 'sub/train.py', 'sub/json.py']);
      // Either the argv is refused, or sub/json.py is an IMPLICIT_CODE finding.
      expect(errors.length).toBeGreaterThan(0);
      if (errors.every((f) => f.code === 'IMPLICIT_CODE'))
        expect(errors.map((f) => f.path)).toContain('inputs[2].path');
    },
  );

  it('a PyPy extension module beside the source of the same name', () => {
    const hits = implicitCodeIn(
      ['main.py', 'helper.py', 'helper.pypy310-pp73-x86_64-linux-gnu.so'],
      [PY, 'main.py'],
    );
    expect(hits.map((h) => h.index)).toContain(2);
  });
});
