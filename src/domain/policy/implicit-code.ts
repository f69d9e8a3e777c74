import { PYTHON_STDLIB_MODULES } from './python-stdlib.js';
import { quoteUntrusted as q, quoteList } from './untrusted.js';

/**
 * Input files an interpreter or tool loads on its own, without the reviewed script naming them (issue
 * 20 item 4): beside benign sources, an unchecked-hash `.pyc` in `__pycache__/`, a `.pth`
 * file and `usercustomize.py` under a user site dir all ran; so did an extension module beside the
 * source of the same name, a package beside a module of the same name, a `json.py` beside the script, a
 * `.pdbrc` read by `breakpoint()`, and one of two paths a viewer shows alike. The task's HOME and working
 * dir are its task dir, where the inputs are placed, so home startup files and caches count too. Such an
 * input is an error finding (`IMPLICIT_CODE`) unless the policy sets `allow_implicit_code`.
 *
 * One table. A `path` row tests one input's `/`-separated relative path on its own (and `gpu-broker
 * propose --dir` leaves such files out); an `inputs` row tests a path against the whole input set
 * (indexed once by `indexInputs`) and says which other input or module it stands for. Each path gets the
 * first row that matches. Loaders that need a cue the reviewer sees are left out on purpose: pytest's
 * `conftest.py` runs only when argv or a reviewed script runs pytest, `.pythonrc` only through
 * PYTHONSTARTUP (refused env), `node_modules/` only through a `require` the reviewer reads.
 */

/** What every row says, for docs and messages. */
interface RowText {
  pattern: string;
  family: string;
  why: string;
}

/** A row over one path. */
export interface PathRow extends RowText {
  scope: 'path';
  test: RegExp;
}

/** A row over a path among all the inputs: null, or what it stands for (server words, values quoted). */
export interface InputsRow extends RowText {
  scope: 'inputs';
  test: (path: string, inputs: InputIndex) => string | null;
}

/** One row of the table. */
export type ImplicitCodeEntry = PathRow | InputsRow;

/** One Python import candidate: how FileFinder would find module `name` in `dir`. */
interface ModuleFile {
  dir: string;
  name: string;
  /** FileFinder's order, lowest wins: package, then extension, source, bytecode (importlib._bootstrap_external). */
  rank: number;
  path: string;
}

/** The inputs, indexed once for the `inputs` rows. */
export interface InputIndex {
  /** The import candidate each path is, if any (moduleFileOf, computed once). */
  moduleFile: ReadonlyMap<string, ModuleFile>;
  /** Import candidates by `dir` + NUL + module name. */
  modules: ReadonlyMap<string, readonly ModuleFile[]>;
  /** Directories that are regular packages (hold an `__init__` module). */
  packages: ReadonlySet<string>;
  /** Directories Python puts first on sys.path: the task dir ('', the cwd) and each argv input's dir. */
  importRoots: ReadonlySet<string>;
  /** Paths by their NFKC form, where two or more share one. */
  confusable: ReadonlyMap<string, readonly string[]>;
}

/**
 * Suffixes Python imports a module from, in FileFinder's order. Extensions: every platform's form, not
 * only the worker's (`.cpython-311-x86_64-linux-gnu.so`, `.cpython-313t-…`, `.abi3.so`, `.so`,
 * `.cp311-win_amd64.pyd`, `.pyd`, PyPy's `.pypy310-pp73-x86_64-linux-gnu.so`): a revision does not know which CPython runs it, and a tag that does not
 * fit is dead weight nobody ships by accident. Sources `.py` and `.pyw` (Windows only, counted anyway).
 */
const EXTENSION =
  /^([^.]+)\.(?:(cpython-[^.]+|cp\d+-[^.]+|pypy\d+-pp\d+-[^.]+)\.(so|pyd)|(abi3)\.so|(so|pyd))$/;
const SOURCE = /^([^.]+)\.pyw?$/;
const BYTECODE = /^([^.]+)\.py[co]$/;

/** How Python would import `base` from its directory: the module name and FileFinder's rank, or null. */
function moduleOf(base: string): { name: string; rank: number } | null {
  const ext = EXTENSION.exec(base);
  if (ext) return { name: ext[1]!, rank: ext[2] ? 1 : ext[4] ? 1.1 : 1.2 };
  const src = SOURCE.exec(base);
  if (src) return { name: src[1]!, rank: 2 };
  const pyc = BYTECODE.exec(base);
  return pyc ? { name: pyc[1]!, rank: 3 } : null;
}

/** The import candidate `path` is, if any: `dir/name.py`, or a package `dir/name/__init__.py`. */
function moduleFileOf(path: string): ModuleFile | null {
  const segs = path.split('/');
  const m = moduleOf(segs[segs.length - 1]!);
  if (m === null) return null;
  if (m.name === '__init__' && segs.length >= 2)
    return { dir: segs.slice(0, -2).join('/'), name: segs[segs.length - 2]!, rank: m.rank / 10, path };
  return { dir: segs.slice(0, -1).join('/'), name: m.name, rank: m.rank, path };
}

const dirOf = (path: string) => path.split('/').slice(0, -1).join('/');

/**
 * The path relative to the task dir (/task: the cwd, where the inputs are placed) that argv item `a`
 * names as Python resolves it, or null outside it: `./pkg/train.py`, `/task/pkg/train.py`,
 * `pkg/./train.py` and `pkg//train.py` are all `pkg/train.py` (taking only `./` off let the other
 * spellings run a script whose dir was not counted as an import root).
 */
function inTaskDir(a: string): string | null {
  const segs: string[] = [];
  for (const s of (a.startsWith('/') ? a : `/task/${a}`).split('/')) {
    if (s === '..') segs.pop();
    else if (s !== '' && s !== '.') segs.push(s);
  }
  return segs[0] === 'task' ? segs.slice(1).join('/') : null;
}

/** Code points every viewer draws as nothing (soft hyphen, variation selectors, fillers, tags…). */
const IGNORABLE = /\p{Default_Ignorable_Code_Point}/gu;

/**
 * A path's NFKC form without its default-ignorable code points, which NFKC keeps (`tra\u00adin.py`
 * shows as `train.py`); ASCII is its own (measured: normalize() was most of the index's cost).
 */
const formOf = (path: string) =>
  /^[\x00-\x7f]*$/.test(path) ? path : path.normalize('NFKC').replace(IGNORABLE, '');

/** Indexes `paths` for the `inputs` rows; `argv` names the scripts whose directories lead sys.path. */
export function indexInputs(paths: readonly string[], argv: readonly string[]): InputIndex {
  const moduleFile = new Map<string, ModuleFile>();
  const modules = new Map<string, ModuleFile[]>();
  const packages = new Set<string>();
  const byForm = new Map<string, string[]>();
  for (const path of paths) {
    const m = moduleFileOf(path);
    if (m !== null) {
      moduleFile.set(path, m);
      const key = `${m.dir}\0${m.name}`;
      const same = modules.get(key);
      if (same) same.push(m);
      else modules.set(key, [m]);
      if (m.rank < 1) packages.add(m.dir === '' ? m.name : `${m.dir}/${m.name}`);
    }
    const form = formOf(path);
    const alike = byForm.get(form);
    if (alike) alike.push(path);
    else byForm.set(form, [path]);
  }
  const all = new Set(paths);
  const importRoots = new Set(['']);
  for (const a of argv) {
    const p = inTaskDir(a);
    if (p !== null && all.has(p)) importRoots.add(dirOf(p));
  }
  const confusable = new Map([...byForm].filter(([, ps]) => new Set(ps).size > 1));
  return { moduleFile, modules, packages, importRoots, confusable };
}

/** The table. */
export const IMPLICIT_CODE: readonly ImplicitCodeEntry[] = [
  {
    scope: 'path',
    pattern: '*.pyc, *.pyo',
    family: 'python',
    why: 'Python runs cached bytecode instead of the source beside it, and nobody can read bytecode',
    test: /\.py[co]$/,
  },
  {
    scope: 'path',
    pattern: '__pycache__/',
    family: 'python',
    why: 'Python loads cached bytecode from it instead of the source',
    test: /(^|\/)__pycache__\//,
  },
  {
    scope: 'path',
    pattern: '*.pth',
    family: 'python',
    why: 'site runs the import lines of .pth files in any site dir at start',
    test: /\.pth$/,
  },
  {
    scope: 'path',
    pattern: 'sitecustomize.py, usercustomize.py',
    family: 'python',
    why: 'site imports them at start when they are on sys.path',
    test: /(^|\/)(site|user)customize\.py$/,
  },
  {
    scope: 'path',
    pattern: '.local/',
    family: 'python',
    why: 'HOME/.local (HOME is the task dir): Python imports the user site .local/lib/python*/ and runs its .pth files; .local/bin and .local/share (jupyter kernels) hold commands',
    test: /^\.local\//,
  },
  {
    scope: 'path',
    pattern: '.pdbrc',
    family: 'python',
    why: 'pdb runs its commands from HOME and the working dir (the task dir) whenever breakpoint() or pdb starts',
    test: /(^|\/)\.pdbrc$/,
  },
  {
    scope: 'path',
    pattern: 'matplotlibrc, .config/matplotlib/, .matplotlib/',
    family: 'python',
    why: 'matplotlib reads its rc from the working dir and HOME, and "backend: module://NAME" imports NAME',
    test: /^(matplotlibrc$|\.matplotlib\/|\.config\/matplotlib\/)/,
  },
  {
    scope: 'path',
    pattern: '.ipython/, .jupyter/',
    family: 'python',
    why: 'IPython (IPython.embed included) and Jupyter tools run the Python config and startup files in them',
    test: /^\.(ipython|jupyter)\//,
  },
  {
    scope: 'path',
    pattern: '.cache/, .triton/, .nv/',
    family: 'gpu libraries',
    why: 'caches in HOME that libraries load code from without building it: torch.hub hubconf.py, torch_extensions and Triton shared objects, huggingface trust_remote_code modules, CUDA JIT kernels',
    test: /^\.(cache|triton|nv)\//,
  },
  {
    scope: 'path',
    pattern: '.nccl.conf',
    family: 'gpu libraries',
    why: 'NCCL reads env settings from HOME/.nccl.conf, plugins (shared objects it loads) among them',
    test: /^\.nccl\.conf$/,
  },
  {
    scope: 'path',
    pattern: '.cupy/, .pyxbld/',
    family: 'gpu libraries',
    why: 'more default caches in HOME: CuPy loads compiled kernels from .cupy/kernel_cache instead of compiling the source it was given, pyximport loads a built module from .pyxbld instead of building the .pyx',
    test: /^\.(cupy|pyxbld)\//,
  },
  {
    scope: 'path',
    pattern: '.numba_config.yaml',
    family: 'gpu libraries',
    why: 'Numba reads NUMBA_* settings from the working dir at import, cache_dir among them (it loads compiled functions and pickled indexes from there: NUMBA_CACHE_DIR as env is ENV_CONTROL)',
    test: /^\.numba_config\.yaml$/,
  },
  {
    scope: 'path',
    pattern: '.profile, .bashrc, .bash_profile, .bash_login, .bash_logout, .zshenv, .zprofile, .zshrc',
    family: 'shell',
    why: 'shells run these files from HOME (the task dir) at start or exit',
    test: /^\.(profile|bashrc|bash_profile|bash_login|bash_logout|zshenv|zprofile|zshrc|zlogin)$/,
  },
  {
    scope: 'path',
    pattern: '.gitconfig, .config/git/, */.git/config, */.git/hooks/',
    family: 'git',
    why: 'git reads them on its own, and config (core.fsmonitor, core.pager, aliases) and hooks run commands',
    test: /^(\.gitconfig$|\.config\/git\/)|(^|\/)\.git\/(config$|hooks\/)/,
  },
  {
    scope: 'path',
    pattern: '.config/',
    family: 'any program',
    why: 'HOME/.config is where tools read their configuration (XDG_CONFIG_HOME), and several run commands or import modules it names',
    test: /^\.config\//,
  },
  {
    scope: 'path',
    pattern: '.perldb',
    family: 'perl',
    why: 'the perl debugger runs it from HOME',
    test: /^\.perldb$/,
  },
  {
    scope: 'path',
    pattern: '.irbrc, .pryrc',
    family: 'ruby',
    why: 'binding.irb and binding.pry run them from HOME and the working dir',
    test: /(^|\/)\.(irbrc|pryrc)$/,
  },
  {
    scope: 'path',
    pattern: '.Rprofile, .Renviron, .RData',
    family: 'r',
    why: 'R and Rscript run .Rprofile and read .Renviron from the working dir or HOME at start; R restores .RData (its .First runs)',
    test: /^\.(Rprofile|Renviron|RData)$/,
  },
  {
    scope: 'inputs',
    pattern: 'a module beside another of the same name (foo.*.so or foo/__init__.py beside foo.py)',
    family: 'python',
    why: 'Python imports a package before an extension module before a source file of the same name, so the reviewer may read the one that never runs',
    test: (path, inputs) => {
      const m = inputs.moduleFile.get(path);
      if (m === undefined) return null;
      const same = inputs.modules.get(`${m.dir}\0${m.name}`) ?? [];
      if (same.length < 2 || same.some((x) => x.rank < m.rank)) return null;
      return `it runs instead of ${quoteList(same.filter((x) => x.path !== path).map((x) => x.path))}`;
    },
  },
  {
    scope: 'inputs',
    pattern: 'a standard-library name (json.py, random/__init__.py) where Python looks first',
    family: 'python',
    why: "the script's directory and the working dir come first on sys.path, so it is imported instead of the standard library; only inside a regular package that no argv item runs from is it a submodule",
    test: (path, inputs) => {
      const m = inputs.moduleFile.get(path);
      if (m === undefined || !PYTHON_STDLIB_MODULES.has(m.name)) return null;
      const first = m.dir === '' || inputs.importRoots.has(m.dir) || !inputs.packages.has(m.dir);
      return first ? `it is imported instead of the standard library's ${q(m.name)}` : null;
    },
  },
  {
    scope: 'inputs',
    pattern: 'two paths that differ only by Unicode normalisation (NFC, NFD, NFKC)',
    family: 'any program',
    why: 'a viewer shows both alike, so the reviewer may read one while the other runs',
    test: (path, inputs) => {
      if (inputs.confusable.size === 0) return null;
      const same = inputs.confusable.get(formOf(path));
      return same ? `it shows like ${quoteList(same.filter((p) => p !== path))}` : null;
    },
  },
];

/**
 * The `path` row that matches `path`, or undefined. The `inputs` rows need the whole input set: see
 * implicitCodeIn. `gpu-broker propose --dir` uses this one to leave files out.
 */
export function implicitCodeOf(path: string): PathRow | undefined {
  for (const e of IMPLICIT_CODE) if (e.scope === 'path' && e.test.test(path)) return e;
  return undefined;
}

/** One input that is implicit code: its index in `paths`, its row, and what it stands for, if a set row. */
export interface ImplicitCodeHit {
  index: number;
  entry: ImplicitCodeEntry;
  detail: string | null;
}

/** Every input of `paths` (in order) an interpreter loads on its own, each with the first row it matches. */
export function implicitCodeIn(paths: readonly string[], argv: readonly string[]): ImplicitCodeHit[] {
  const inputs = indexInputs(paths, argv);
  const hits: ImplicitCodeHit[] = [];
  for (const [index, path] of paths.entries()) {
    for (const entry of IMPLICIT_CODE) {
      if (entry.scope === 'path') {
        if (!entry.test.test(path)) continue;
        hits.push({ index, entry, detail: null });
      } else {
        const detail = entry.test(path, inputs);
        if (detail === null) continue;
        hits.push({ index, entry, detail });
      }
      break;
    }
  }
  return hits;
}
