import { describe, expect, it } from 'vitest';
import { PolicySchema } from '../../../../src/contracts/policy.js';
import { type TaskSpec, TaskSpecSchema } from '../../../../src/contracts/task-spec.js';
import {
  ENV_CONTROL,
  envControlFinding,
  envControlOf,
  installedOrPrivatePaths,
} from '../../../../src/domain/policy/env-control.js';
import { evaluatePolicy } from '../../../../src/domain/policy/evaluate.js';
import { validSpec } from '../../../support/spec.js';

/**
 * The env-control table (docs/security.md "Code the reviewer did not read"; docs/security.md "What a reviewer must read, and what the broker guarantees"), one test per row: a value pointing into the task
 * dir (where the inputs are) is an ENV_CONTROL error naming the variable and its family; a row with a
 * `benign` test lets values that only select installed code or name installed or task-private paths
 * through, and nothing an adversary would try next.
 */

const policy = PolicySchema.parse({ executables: [{ path: '/bin/sh' }] });
const withEnv = (env: Record<string, string>): TaskSpec =>
  TaskSpecSchema.parse(validSpec({ runtime: { kind: 'process', argv: ['/bin/sh', '-c', 'true'], env } }));
const findingsOf = (name: string, value: string) =>
  evaluatePolicy(withEnv({ [name]: value }), policy, { fileDigests: {} }).map(
    (f) => `${f.severity}:${f.code}`,
  );
/** A concrete name for a row (a prefix row gets a suffix); the loader's three always-refused names aside. */
const nameOf = (row: string) => (row.endsWith('*') ? `${row.slice(0, -1)}X` : row);

describe('every row', () => {
  it.each(ENV_CONTROL.map((e) => [e.name, e.family] as const))(
    '%s (%s): a task-dir value is an error',
    (row, family) => {
      const name = nameOf(row);
      for (const value of ['/task/payload', './payload', 'module://payload:Class']) {
        const fs = evaluatePolicy(withEnv({ [name]: value }), policy, { fileDigests: {} });
        expect(
          fs.map((f) => `${f.severity}:${f.code}`),
          `${name}=${value}`,
        ).toEqual(['error:ENV_CONTROL']);
        expect(fs[0]?.message).toContain(family);
        expect(fs[0]?.message).toContain(`"${name}"`);
      }
      expect(envControlOf(name)?.name).toBe(row);
    },
  );
});

describe('values that only select installed code or task-private paths (docs/security.md "What a reviewer must read, and what the broker guarantees")', () => {
  const benign: Array<[string, string]> = [
    ['PATH', '/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'],
    ['PATH', '/opt/conda/bin:/usr/bin:/bin'],
    ['HOME', '/tmp/home'],
    ['XDG_CACHE_HOME', '/tmp/cache'],
    ['XDG_DATA_DIRS', '/usr/local/share:/usr/share'],
    ['MPLBACKEND', 'Agg'],
    ['MPLBACKEND', 'svg'],
    ['MPLCONFIGDIR', '/tmp/mpl'],
    ['TRITON_CACHE_DIR', '/tmp/triton'],
    ['TRITON_PTXAS_PATH', '/usr/local/cuda/bin/ptxas'],
    ['TORCHINDUCTOR_CACHE_DIR', '/dev/shm/inductor'],
    ['TORCH_EXTENSIONS_DIR', '/tmp/ext/'],
    ['CUDA_CACHE_PATH', '/tmp/nv'],
    ['NUMBA_CACHE_DIR', '/tmp/numba'],
    ['CUDA_HOME', '/usr/local/cuda'],
    ['CUDA_PATH', '/usr/local/cuda-12.4'],
    ['NUMBA_CUDA_DRIVER', '/usr/lib/x86_64-linux-gnu/libcuda.so.1'],
    ['JAX_COMPILATION_CACHE_DIR', '/tmp/jax-cache'],
    ['XLA_FLAGS', '--xla_force_host_platform_device_count=8'],
    ['XLA_FLAGS', '--xla_gpu_cuda_data_dir=/usr/local/cuda --xla_gpu_enable_triton_gemm=false'],
    ['XLA_FLAGS', '  --xla_dump_to=/tmp/xla-dump   --xla_dump_hlo_as_text '],
    ['TF_XLA_FLAGS', '--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit'],
    ['XLA_FLAGS', ''],
    ['HF_HOME', '/tmp/hf'],
    ['NCCL_NET_PLUGIN', 'none'],
    ['NCCL_NET_PLUGIN', 'aws-ofi'],
    ['OMP_TOOL_LIBRARIES', '/usr/lib/x86_64-linux-gnu/libarcher.so'],
  ];
  it.each(benign)('%s=%s: no finding', (name, value) => {
    expect(findingsOf(name, value)).toEqual([]);
    expect(envControlFinding(name, value)).toBeUndefined();
    expect(envControlOf(name)).toBeDefined();
  });

  const attacks: Array<[string, string]> = [
    ['PATH', '/task/bin:/usr/bin:/bin'],
    ['PATH', '/usr/bin:/bin:'], // an empty element is the working dir, /task
    ['PATH', ':/usr/bin'],
    ['PATH', '/usr/bin::/bin'],
    ['PATH', 'bin:/usr/bin'],
    ['PATH', '/usr/../task/bin'],
    ['PATH', '/tmp/../task'],
    ['PATH', '/usr/./bin'],
    ['PATH', '/proc/self/cwd/bin'],
    ['PATH', '/dev/fd/3'],
    ['PATH', '/usrx/bin'],
    ['HOME', '/task/sub'],
    ['HOME', '/mnt/shared'],
    ['XDG_CONFIG_HOME', '/task/cfg'],
    ['MPLBACKEND', 'module://helper'],
    ['MPLBACKEND', 'module://antigravity'],
    ['MPLCONFIGDIR', 'mpl'],
    ['TRITON_CACHE_DIR', '/mnt/shared/triton'],
    ['TRITON_CACHE_DIR', '~/.triton'],
    ['TRITON_CACHE_MANAGER', 'helper:Manager'],
    ['TORCH_HOME', '/task/hub'],
    ['HF_HOME', 'hf'],
    ['HF_HOME', '/mnt/models/hf'],
    ['TRANSFORMERS_CACHE', '/task/.x'],
    ['NCCL_NET_PLUGIN', '/task/libnccl-net-x.so'],
    ['NCCL_NET_PLUGIN', 'x.so'],
    ['NCCL_CONF_FILE', '/task/nccl.conf'],
    ['OMP_TOOL_LIBRARIES', '/usr/lib/libarcher.so:/task/x.so'],
    ['PYTHONOPTIMIZE', '1'],
    ['JUPYTER_PATH', '/task/j'],
    ['IPYTHONDIR', '/task/ipy'],
    // Libraries that load (or run) what these name: a libcuda, libnvvm, nvcc of the inputs.
    ['NUMBA_CUDA_DRIVER', '/task/libcuda.so'],
    ['CUDA_HOME', '/task/cuda'],
    ['CUDA_PATH', '/task/cuda'],
    // XLA runs ptxas from the first, and uses compiled GPU code from the others instead of compiling.
    ['XLA_FLAGS', '--xla_gpu_cuda_data_dir=/task/cuda'],
    ['XLA_FLAGS', '--xla_force_host_platform_device_count=8 --xla_gpu_ptx_file=/task/k.ptx'],
    ['XLA_FLAGS', '--xla_gpu_kernel_cache_file=./cache.bin'],
    ['XLA_FLAGS', '--xla_gpu_cuda_data_dir=~/cuda'],
    ['XLA_FLAGS', '--xla_gpu_cuda_data_dir=/usr/../task'],
    ['XLA_FLAGS', '--xla_gpu_cuda_data_dir="/task/cuda"'],
    ['XLA_FLAGS', 'xla_gpu_cuda_data_dir=/task/cuda'],
    ['TF_XLA_FLAGS', '--tf_xla_auto_jit=2 --xla_gpu_cuda_data_dir=/mnt/shared/cuda'],
    ['JAX_COMPILATION_CACHE_DIR', '/task/jax'],
  ];
  it.each(attacks)('%s=%s: an ENV_CONTROL error', (name, value) => {
    expect(findingsOf(name, value)).toEqual(['error:ENV_CONTROL']);
  });

  it('an operator who trusts a data mount allows the name: a warning the reviewer still sees', () => {
    const open = PolicySchema.parse({ ...policy, allowed_control_env: ['HF_HOME'] });
    const fs = evaluatePolicy(withEnv({ HF_HOME: '/mnt/models/hf' }), open, { fileDigests: {} });
    expect(fs.map((f) => `${f.severity}:${f.code}`)).toEqual(['warning:ENV_CONTROL_ALLOWED']);
  });

  it('installedOrPrivatePaths: absolute, clean, under installed or private roots only', () => {
    expect(installedOrPrivatePaths('/usr/bin')).toBe(true);
    expect(installedOrPrivatePaths('/tmp')).toBe(true);
    expect(installedOrPrivatePaths('')).toBe(false);
    expect(installedOrPrivatePaths('/')).toBe(false);
    expect(installedOrPrivatePaths('/task')).toBe(false);
  });

  it('names that load nothing stay out of the table (the documented reasons in env-control.ts)', () => {
    for (const name of [
      'PYTHONSAFEPATH',
      'PYTHONNOUSERSITE',
      'PYTHONUNBUFFERED',
      'PYTHONHASHSEED',
      'PYTHONDONTWRITEBYTECODE',
      'TMPDIR',
      'HF_HUB_OFFLINE',
      'NCCL_DEBUG',
      'TORCH_CUDA_ARCH_LIST',
      'TRITON_PRINT_AUTOTUNING',
    ])
      expect(envControlOf(name), name).toBeUndefined();
  });
});
