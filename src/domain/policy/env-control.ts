/**
 * Env names that make a program run code or load files of the spec's choosing (docs/security.md "Code the reviewer did not read"): with a
 * benign, reviewed script, `PYTHONWARNINGS` + `BROWSER`, `PYTHONSTARTUP`, `PERL5OPT`, `NODE_OPTIONS`,
 * `BASH_ENV`, `JAVA_TOOL_OPTIONS`, … run a command the reviewer never saw as code. A spec setting one is
 * an error finding (`ENV_CONTROL`) unless the operator lists the name in `policy.allowed_control_env`.
 *
 * One table, by interpreter family. A name ending in `*` is a prefix. Keep each `why` to one line: it
 * is shown to the reviewer.
 *
 * Later (docs/security.md "Code the reviewer did not read") came the names that change *where* a program or library loads code from: `PATH`, `HOME`,
 * `XDG_*`, and the caches GPU libraries load compiled or downloaded code from without building it
 * (Triton, TorchInductor, torch extensions and hub, CUDA's JIT cache, Numba, CuPy, Hugging Face remote
 * code) and the config dirs of matplotlib, IPython and Jupyter, whose config files are Python or name
 * modules to import. Pointed at the task dir, where the inputs are, each runs input files that no row of
 * the implicit-code table (src/domain/policy/implicit-code.ts) looks at, since that table knows the default
 * places only. Such a row has a `benign` test on the value: a value that only selects among installed code
 * (`MPLBACKEND=Agg`) or only names installed or task-private directories (`TRITON_CACHE_DIR=/tmp/triton`,
 * `PATH=/usr/local/cuda/bin:/usr/bin:/bin`) gets no finding, since setting those is routine in training
 * scripts and a finding on each would teach reviewers to skip findings. Anything else is the same
 * `ENV_CONTROL` error as the rest of the table: the only files the task did not write that such a value
 * can reach are the submitter's inputs (/task) or a data mount (/mnt, which may be writable and shared
 * between tasks), and an operator who trusts a mount lists the name in `allowed_control_env`.
 *
 * Not in the table, on purpose: `PYTHONSAFEPATH` (it drops the script's dir from sys.path, so Python
 * loads less, never more), `PYTHONNOUSERSITE`, `PYTHONDONTWRITEBYTECODE`, `PYTHONUNBUFFERED`,
 * `PYTHONHASHSEED`, `PYTHONIOENCODING`/`PYTHONUTF8` (a source file's encoding does not follow them),
 * `PYTHONCASEOK` (ignored on Linux, where workers run), `TMPDIR` (the private /tmp by default; what a
 * reviewed script writes there is its own), GUI toolkit module paths (`GTK_MODULES`, `QT_PLUGIN_PATH`:
 * no display in a sandbox), and a scripting interpreter's isolated mode already ignores its own family
 * (`python -E` every `PYTHON*`), which still counts for a reviewed shell script that starts python.
 */

/** One row of the table. */
export interface EnvControlEntry {
  /** The exact name, or a prefix ending in `*` (`LD_*`). */
  name: string;
  /** Which program reads it. */
  family: string;
  /** What it makes that program do. */
  why: string;
  /**
   * Values that only select installed code or name installed or task-private paths: no finding. Absent:
   * every value is a finding.
   */
  benign?: (value: string) => boolean;
}

/**
 * Directories whose files the submitter cannot have placed: installed software (root-owned in a worker's
 * image or host) and the task's own private tmpfs, empty at start. Not /task (the inputs), not /mnt (data
 * mounts, possibly writable and shared), not /proc or /dev (`/proc/self/cwd` is /task).
 */
const INSTALLED_OR_PRIVATE = /^\/(usr|opt|bin|sbin|lib|lib32|lib64|tmp|dev\/shm)(\/|$)/;

/**
 * A `:`-separated list of absolute paths, each under INSTALLED_OR_PRIVATE, with no `.`, `..` or empty
 * segment (an empty list element means the working dir, /task).
 */
export function installedOrPrivatePaths(value: string): boolean {
  return value.split(':').every(
    (p) =>
      INSTALLED_OR_PRIVATE.test(p) &&
      !p
        .slice(1)
        .replace(/\/$/, '')
        .split('/')
        .some((seg) => seg === '' || seg === '.' || seg === '..'),
  );
}

/** A bare name (a backend or plugin an installed library resolves itself), no path, no module://. */
const bareName = (value: string) => /^[A-Za-z0-9_-]+$/.test(value);

/**
 * An XLA flags value (`XLA_FLAGS`, `TF_XLA_FLAGS`) that names no file the submitter could have placed:
 * whitespace-separated `--name` or `--name=value` tokens, each value that looks like a path (a `/`, or a
 * leading `.` or `~`) installed or task-private. Flags such as `--xla_gpu_cuda_data_dir` (where XLA runs
 * `ptxas` from), `--xla_gpu_ptx_file` or `--xla_gpu_kernel_cache_file` (compiled GPU code used instead
 * of compiling) load code from their paths; counts and switches (`--xla_force_host_platform_device_count=8`)
 * do not. Anything else, quoting included, is not benign.
 */
export function xlaFlagsBenign(value: string): boolean {
  if (value.trim() === '') return true;
  return value
    .trim()
    .split(/\s+/)
    .every((t) => {
      const m = /^--[A-Za-z0-9_]+(?:=([^\s'"\\]*))?$/.exec(t);
      if (m === null) return false;
      const v = m[1];
      if (v === undefined || !/[/~]|^\./.test(v)) return true;
      return installedOrPrivatePaths(v);
    });
}

/** A row for a directory a library loads code from (its own default lives in HOME, the task dir). */
const loadDir = (name: string, family: string, why: string): EnvControlEntry => ({
  name,
  family,
  why,
  benign: installedOrPrivatePaths,
});

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
  {
    name: 'PYTHONOPTIMIZE',
    family: 'python',
    why: 'Python skips assert statements and __debug__ blocks: checks the reviewer reads do not run',
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
  // where programs and libraries look (docs/security.md "What a reviewer must read, and what the broker guarantees"): every default in HOME is the task dir
  {
    name: 'PATH',
    family: 'program lookup',
    why: 'a command started by bare name (sh, nvidia-smi, python) is looked up in these directories',
    benign: installedOrPrivatePaths,
  },
  loadDir('HOME', 'any program', 'startup files, user site, rc files and caches are read from it'),
  loadDir('XDG_*', 'any program', 'tools read their config, data (jupyter kernels) and caches from it'),
  {
    name: 'MPLBACKEND',
    family: 'python library',
    why: 'matplotlib imports the module a "module://NAME" backend names',
    benign: bareName,
  },
  loadDir(
    'MPLCONFIGDIR',
    'python library',
    'matplotlib reads matplotlibrc (which can name a module to import) from it',
  ),
  loadDir('IPYTHONDIR', 'python library', 'IPython runs the config and startup files (Python) in it'),
  loadDir('JUPYTER_CONFIG_DIR', 'python library', 'Jupyter tools run the config files (Python) in it'),
  loadDir('JUPYTER_CONFIG_PATH', 'python library', 'Jupyter tools run the config files (Python) in it'),
  loadDir('JUPYTER_PATH', 'python library', 'Jupyter loads kernels (commands) and extensions from it'),
  loadDir('JUPYTER_DATA_DIR', 'python library', 'Jupyter loads kernels (commands) and extensions from it'),
  loadDir(
    'TRITON_CACHE_DIR',
    'gpu library',
    'Triton loads compiled kernels and launcher shared objects from it',
  ),
  loadDir(
    'TRITON_HOME',
    'gpu library',
    'Triton keeps its cache (shared objects it loads) and overrides in it',
  ),
  loadDir('TRITON_OVERRIDE_DIR', 'gpu library', 'Triton loads kernel overrides from it instead of compiling'),
  loadDir('TRITON_LIBCUDA_PATH', 'gpu library', 'Triton loads libcuda from it'),
  loadDir('TRITON_LIBDEVICE_PATH', 'gpu library', 'Triton links this libdevice into every kernel'),
  loadDir('TRITON_PTXAS_PATH', 'gpu library', 'Triton runs this program to assemble kernels'),
  loadDir('TRITON_CUOBJDUMP_PATH', 'gpu library', 'Triton runs this program'),
  loadDir('TRITON_NVDISASM_PATH', 'gpu library', 'Triton runs this program'),
  {
    name: 'TRITON_CACHE_MANAGER',
    family: 'gpu library',
    why: 'Triton imports the module:class it names',
  },
  {
    name: 'TRITON_REMOTE_CACHE_BACKEND',
    family: 'gpu library',
    why: 'Triton imports the module:class it names',
  },
  loadDir(
    'TORCHINDUCTOR_CACHE_DIR',
    'gpu library',
    'torch.compile loads generated Python and shared objects from it',
  ),
  loadDir(
    'TORCH_EXTENSIONS_DIR',
    'gpu library',
    'torch.utils.cpp_extension loads a built shared object from it instead of building',
  ),
  loadDir('TORCH_HOME', 'gpu library', 'torch.hub runs hubconf.py and loads checkpoints (pickles) from it'),
  loadDir(
    'CUDA_CACHE_PATH',
    'gpu library',
    'the CUDA driver loads JIT-compiled kernels from it instead of compiling the PTX',
  ),
  loadDir('NUMBA_CACHE_DIR', 'gpu library', 'Numba loads compiled functions (and pickled indexes) from it'),
  loadDir('CUPY_CACHE_DIR', 'gpu library', 'CuPy loads compiled kernels from it'),
  loadDir('NUMBA_CUDA_DRIVER', 'gpu library', 'Numba loads the CUDA driver library (libcuda) from it'),
  loadDir(
    'JAX_COMPILATION_CACHE_DIR',
    'gpu library',
    'JAX loads compiled executables from it instead of compiling',
  ),
  {
    name: 'XLA_FLAGS',
    family: 'gpu library',
    why: 'XLA runs ptxas from, or loads compiled GPU code from, the paths some of its flags name',
    benign: xlaFlagsBenign,
  },
  {
    name: 'TF_XLA_FLAGS',
    family: 'gpu library',
    why: "TensorFlow's XLA runs ptxas from, or loads compiled GPU code from, the paths some of its flags name",
    benign: xlaFlagsBenign,
  },
  loadDir(
    'CUDA_HOME',
    'gpu library',
    'Numba loads libnvvm and libdevice from under it; torch extensions and CuPy run its bin/nvcc',
  ),
  loadDir(
    'CUDA_PATH',
    'gpu library',
    'Numba loads libnvvm and libdevice from under it; torch extensions and CuPy run its bin/nvcc',
  ),
  loadDir(
    'HF_HOME',
    'python library',
    'Hugging Face imports trust_remote_code modules and loads models from it',
  ),
  loadDir('HF_MODULES_CACHE', 'python library', 'transformers imports trust_remote_code modules from it'),
  loadDir('HF_HUB_CACHE', 'python library', 'Hugging Face loads models (and their remote code) from it'),
  loadDir(
    'HUGGINGFACE_HUB_CACHE',
    'python library',
    'Hugging Face loads models (and their remote code) from it',
  ),
  loadDir(
    'TRANSFORMERS_CACHE',
    'python library',
    'transformers loads models (and their remote code) from it',
  ),
  loadDir('HF_DATASETS_CACHE', 'python library', 'datasets runs loading scripts and loads data from it'),
  {
    name: 'NCCL_NET_PLUGIN',
    family: 'gpu library',
    why: 'NCCL loads this network plugin (a shared object) into the process',
    benign: (v) => bareName(v) || installedOrPrivatePaths(v),
  },
  {
    name: 'NCCL_TUNER_PLUGIN',
    family: 'gpu library',
    why: 'NCCL loads this tuner plugin (a shared object) into the process',
    benign: (v) => bareName(v) || installedOrPrivatePaths(v),
  },
  {
    name: 'NCCL_PROFILER_PLUGIN',
    family: 'gpu library',
    why: 'NCCL loads this profiler plugin (a shared object) into the process',
    benign: (v) => bareName(v) || installedOrPrivatePaths(v),
  },
  loadDir('NCCL_CONF_FILE', 'gpu library', 'NCCL reads env settings (plugins among them) from this file'),
  loadDir('OMP_TOOL_LIBRARIES', 'openmp', 'the OpenMP runtime loads these tool libraries into the process'),
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

/**
 * The table's row for `name`, or undefined when the name controls nothing the table knows. A row with a
 * `benign` test still answers here: whether a value is a finding is envControlFinding's question.
 */
export function envControlOf(name: string): EnvControlEntry | undefined {
  return ENV_CONTROL.find((e) =>
    e.name.endsWith('*') ? name.startsWith(e.name.slice(0, -1)) : name === e.name,
  );
}

/** The row whose finding `name=value` is: undefined when the name controls nothing or the value is benign. */
export function envControlFinding(name: string, value: string): EnvControlEntry | undefined {
  const entry = envControlOf(name);
  return entry?.benign?.(value) ? undefined : entry;
}
