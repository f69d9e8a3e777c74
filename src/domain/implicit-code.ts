/**
 * Input files an interpreter or tool loads on its own, without the reviewed script naming them (issue
 * 20 item 4): beside benign sources, an unchecked-hash `.pyc` in `__pycache__/`, a `.pth` file and
 * `usercustomize.py` under a user site dir all ran. The task's HOME is its task dir, where the inputs
 * are placed, so home startup files count too. Such an input is an error finding (`IMPLICIT_CODE`)
 * unless the policy sets `allow_implicit_code`; `gpu-broker propose --dir` leaves them out.
 *
 * One table; each row is a test over the input's `/`-separated relative path.
 */

/** One row of the table. */
export interface ImplicitCodeEntry {
  /** What the row matches, for docs and messages. */
  pattern: string;
  family: string;
  why: string;
  test: RegExp;
}

/** The table. */
export const IMPLICIT_CODE: readonly ImplicitCodeEntry[] = [
  {
    pattern: '*.pyc, *.pyo',
    family: 'python',
    why: 'Python runs cached bytecode instead of the source beside it, and nobody can read bytecode',
    test: /\.py[co]$/,
  },
  {
    pattern: '__pycache__/',
    family: 'python',
    why: 'Python loads cached bytecode from it instead of the source',
    test: /(^|\/)__pycache__\//,
  },
  {
    pattern: '*.pth',
    family: 'python',
    why: 'site runs the import lines of .pth files in any site dir at start',
    test: /\.pth$/,
  },
  {
    pattern: 'sitecustomize.py, usercustomize.py',
    family: 'python',
    why: 'site imports them at start when they are on sys.path',
    test: /(^|\/)(site|user)customize\.py$/,
  },
  {
    pattern: '.local/lib/python*/',
    family: 'python',
    why: 'the user site dir (HOME is the task dir): Python imports from it and runs its .pth files',
    test: /^\.local\/lib\/python[^/]*\//,
  },
  {
    pattern: '.profile, .bashrc, .bash_profile, .bash_login, .bash_logout, .zshenv, .zprofile, .zshrc',
    family: 'shell',
    why: 'shells run these files from HOME (the task dir) at start or exit',
    test: /^\.(profile|bashrc|bash_profile|bash_login|bash_logout|zshenv|zprofile|zshrc|zlogin)$/,
  },
  {
    pattern: '.gitconfig, .config/git/, */.git/config, */.git/hooks/',
    family: 'git',
    why: 'git reads them on its own, and config (core.fsmonitor, core.pager, aliases) and hooks run commands',
    test: /^(\.gitconfig$|\.config\/git\/)|(^|\/)\.git\/(config$|hooks\/)/,
  },
  {
    pattern: '.perldb',
    family: 'perl',
    why: 'the perl debugger runs it from HOME',
    test: /^\.perldb$/,
  },
];

/** The row that matches `path`, or undefined when no interpreter loads it on its own. */
export function implicitCodeOf(path: string): ImplicitCodeEntry | undefined {
  return IMPLICIT_CODE.find((e) => e.test.test(path));
}
