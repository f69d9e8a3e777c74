/**
 * Env names that make a program run code or load files of the spec's choosing (issue 20 item 2): with a
 * benign, reviewed script, `PYTHONWARNINGS` + `BROWSER`, `PYTHONSTARTUP`, `PERL5OPT`, `NODE_OPTIONS`,
 * `BASH_ENV`, `JAVA_TOOL_OPTIONS`, … run a command the reviewer never saw as code. A spec setting one is
 * an error finding (`ENV_CONTROL`) unless the operator lists the name in `policy.allowed_control_env`.
 *
 * One table, by interpreter family. A name ending in `*` is a prefix. Keep each `why` to one line: it
 * is shown to the reviewer.
 */

/** One row of the table. */
export interface EnvControlEntry {
  /** The exact name, or a prefix ending in `*` (`LD_*`). */
  name: string;
  /** Which program reads it. */
  family: string;
  /** What it makes that program do. */
  why: string;
}

/** The table. */
export const ENV_CONTROL: readonly EnvControlEntry[] = [
  // dynamic loader and C library: read by every dynamically linked program, the sandbox's helpers included
  {
    name: 'LD_*',
    family: 'dynamic loader',
    why: 'ld.so loads libraries, audits or writes debug/profile files where it says',
  },
  {
    name: 'GCONV_PATH',
    family: 'dynamic loader',
    why: 'glibc loads charset conversion modules (shared objects) from it',
  },
  {
    name: 'GLIBC_TUNABLES',
    family: 'dynamic loader',
    why: 'tunes ld.so and malloc internals (a known privilege-escalation vector)',
  },
  { name: 'MALLOC_TRACE', family: 'dynamic loader', why: 'glibc writes a trace file at the path it names' },
  { name: 'LOCPATH', family: 'dynamic loader', why: 'glibc loads locale data files from it' },
  { name: 'NLSPATH', family: 'dynamic loader', why: 'catopen loads message catalogs from it' },
  { name: 'HOSTALIASES', family: 'dynamic loader', why: 'the resolver reads a host alias file from it' },
  // shells
  { name: 'BASH_ENV', family: 'shell', why: 'bash runs this file before any non-interactive script' },
  { name: 'ENV', family: 'shell', why: 'sh/dash (and bash in POSIX mode) run this file at start' },
  { name: 'SHELLOPTS', family: 'shell', why: 'turns on bash options such as xtrace at start' },
  { name: 'BASHOPTS', family: 'shell', why: 'turns on bash shopt options at start' },
  {
    name: 'PS4',
    family: 'shell',
    why: 'expanded (command substitution included) before each traced command',
  },
  { name: 'PS0', family: 'shell', why: 'expanded by an interactive bash before each command' },
  { name: 'PS1', family: 'shell', why: 'expanded (command substitution included) by an interactive shell' },
  { name: 'PROMPT_COMMAND', family: 'shell', why: 'run by an interactive bash before each prompt' },
  {
    name: 'IFS',
    family: 'shell',
    why: 'changes how a shell splits words, so a script runs other commands than it reads',
  },
  { name: 'CDPATH', family: 'shell', why: "makes a script's cd land in another directory than it reads" },
  { name: 'GLOBIGNORE', family: 'shell', why: "changes what a script's globs match" },
  { name: 'BASH_FUNC_*', family: 'shell', why: 'bash imports it as a function that overrides a command' },
  { name: 'BASH_XTRACEFD', family: 'shell', why: 'bash writes its trace to this file descriptor' },
  { name: 'BASH_LOADABLES_PATH', family: 'shell', why: 'bash loads builtins (shared objects) from it' },
  { name: 'ZDOTDIR', family: 'shell', why: 'zsh runs its startup files from this directory' },
  // Python
  { name: 'PYTHONSTARTUP', family: 'python', why: 'Python runs this file at start (interactive and -i)' },
  { name: 'PYTHONPATH', family: 'python', why: 'Python imports modules from these directories first' },
  { name: 'PYTHONHOME', family: 'python', why: 'Python loads its whole standard library from it' },
  { name: 'PYTHONPLATLIBDIR', family: 'python', why: 'changes where Python loads its platform library from' },
  {
    name: 'PYTHONWARNINGS',
    family: 'python',
    why: 'imports the module a warning category names (with BROWSER: runs a command)',
  },
  {
    name: 'PYTHONUSERBASE',
    family: 'python',
    why: 'Python imports the user site (and its .pth files) from it',
  },
  {
    name: 'PYTHONINSPECT',
    family: 'python',
    why: 'Python goes interactive after the script, reading code from stdin',
  },
  { name: 'PYTHONBREAKPOINT', family: 'python', why: 'breakpoint() imports and calls the callable it names' },
  {
    name: 'PYTHONPYCACHEPREFIX',
    family: 'python',
    why: 'Python loads cached bytecode from this tree instead of the source',
  },
  { name: 'PYTHONEXECUTABLE', family: 'python', why: 'changes sys.executable, which subprocesses run' },
  // Perl
  { name: 'PERL5OPT', family: 'perl', why: 'command-line switches (-M modules, -e code) for every perl' },
  { name: 'PERL5LIB', family: 'perl', why: 'perl loads modules from these directories first' },
  { name: 'PERLLIB', family: 'perl', why: 'perl loads modules from these directories first' },
  { name: 'PERL5DB', family: 'perl', why: 'code the debugger runs' },
  // Node
  { name: 'NODE_OPTIONS', family: 'node', why: 'command-line options (--require, --import) for every node' },
  { name: 'NODE_PATH', family: 'node', why: 'node resolves modules from these directories' },
  { name: 'NODE_REPL_EXTERNAL_MODULE', family: 'node', why: 'node loads this module instead of its REPL' },
  // Ruby
  { name: 'RUBYOPT', family: 'ruby', why: 'command-line options (-r libraries) for every ruby' },
  { name: 'RUBYLIB', family: 'ruby', why: 'ruby loads libraries from these directories first' },
  { name: 'GEM_HOME', family: 'ruby', why: 'rubygems loads gems (and their plugins) from it' },
  { name: 'GEM_PATH', family: 'ruby', why: 'rubygems loads gems (and their plugins) from it' },
  // Java
  { name: 'JAVA_TOOL_OPTIONS', family: 'java', why: 'options (-javaagent, -agentpath) for every JVM' },
  { name: '_JAVA_OPTIONS', family: 'java', why: 'options (-javaagent, -agentpath) for every JVM' },
  { name: 'JDK_JAVA_OPTIONS', family: 'java', why: 'options for the java launcher' },
  { name: 'CLASSPATH', family: 'java', why: 'the JVM loads classes from it' },
  // other interpreters
  { name: 'R_PROFILE', family: 'r', why: 'R runs this file at start' },
  { name: 'R_PROFILE_USER', family: 'r', why: 'R runs this file at start' },
  { name: 'R_ENVIRON', family: 'r', why: 'R reads startup settings from it' },
  { name: 'R_ENVIRON_USER', family: 'r', why: 'R reads startup settings from it' },
  { name: 'R_LIBS', family: 'r', why: 'R loads packages from these directories first' },
  { name: 'R_LIBS_USER', family: 'r', why: 'R loads packages from these directories first' },
  { name: 'LUA_INIT*', family: 'lua', why: 'lua runs this code (or @file) at start' },
  { name: 'LUA_PATH*', family: 'lua', why: 'lua loads modules from it' },
  { name: 'LUA_CPATH*', family: 'lua', why: 'lua loads C modules (shared objects) from it' },
  { name: 'TCLLIBPATH', family: 'tcl', why: 'tclsh loads packages from it' },
  // libraries most programs link
  {
    name: 'OPENSSL_CONF',
    family: 'openssl',
    why: 'OpenSSL loads engines and providers (shared objects) its config names',
  },
  { name: 'OPENSSL_ENGINES', family: 'openssl', why: 'OpenSSL loads engines from it' },
  { name: 'OPENSSL_MODULES', family: 'openssl', why: 'OpenSSL loads providers from it' },
  {
    name: 'CUDA_INJECTION64_PATH',
    family: 'gpu runtime',
    why: 'the CUDA driver loads this library into the process',
  },
  {
    name: 'CUDA_INJECTION32_PATH',
    family: 'gpu runtime',
    why: 'the CUDA driver loads this library into the process',
  },
  { name: 'NVTX_INJECTION64_PATH', family: 'gpu runtime', why: 'NVTX loads this library into the process' },
  {
    name: 'HSA_TOOLS_LIB',
    family: 'gpu runtime',
    why: 'the ROCm runtime loads these tool libraries into the process',
  },
  {
    name: 'ROCP_TOOL_LIBRARIES',
    family: 'gpu runtime',
    why: 'the ROCm profiler loads these libraries into the process',
  },
  // programs that other programs run
  { name: 'BROWSER', family: 'program to run', why: "Python's webbrowser (and others) run this command" },
  { name: 'EDITOR', family: 'program to run', why: 'tools that open an editor run this command' },
  { name: 'VISUAL', family: 'program to run', why: 'tools that open an editor run this command' },
  {
    name: 'PAGER',
    family: 'program to run',
    why: 'tools that page output (git, man, pydoc) run this command',
  },
  { name: 'MANPAGER', family: 'program to run', why: 'man runs this command' },
  { name: 'LESSOPEN', family: 'program to run', why: 'less runs this command on every file it opens' },
  { name: 'LESSCLOSE', family: 'program to run', why: 'less runs this command on every file it closes' },
  { name: 'SSH_ASKPASS', family: 'program to run', why: 'ssh runs this command for a password' },
  { name: 'GIT_SSH', family: 'git', why: 'git runs this program instead of ssh' },
  { name: 'GIT_SSH_COMMAND', family: 'git', why: 'git runs this shell command instead of ssh' },
  { name: 'GIT_ASKPASS', family: 'git', why: 'git runs this command for credentials' },
  { name: 'GIT_EDITOR', family: 'git', why: 'git runs this command as the editor' },
  { name: 'GIT_PAGER', family: 'git', why: 'git runs this command as the pager' },
  { name: 'GIT_EXTERNAL_DIFF', family: 'git', why: 'git runs this command for diffs' },
  { name: 'GIT_PROXY_COMMAND', family: 'git', why: 'git runs this command to connect' },
  { name: 'GIT_EXEC_PATH', family: 'git', why: 'git runs its sub-commands from this directory' },
  { name: 'GIT_TEMPLATE_DIR', family: 'git', why: 'git init copies hooks from it' },
  {
    name: 'GIT_CONFIG*',
    family: 'git',
    why: 'adds git config (core.sshCommand, core.fsmonitor, aliases run commands)',
  },
];

/** The table's row for `name`, or undefined when the name controls nothing the table knows. */
export function envControlOf(name: string): EnvControlEntry | undefined {
  return ENV_CONTROL.find((e) =>
    e.name.endsWith('*') ? name.startsWith(e.name.slice(0, -1)) : name === e.name,
  );
}
