#!/usr/bin/env python3
"""gpu-broker qualification workload (docs/qualification.md "The workload").

Run by the worker executor on the leased cards. It starts one rank per visible card itself (Debian's
torchrun is broken on Python 3.11, and a self-launching script behaves the same on every host), and on
every rank:

  (a) all_reduce SUM of a tensor holding rank + 1, compared exactly with N(N+1)/2;
  (b) an fp32 GEMM checked against a float64 CPU reference, timed, with achieved TFLOP/s;
  (c) a timed large all_reduce giving algbw = bytes / time and busbw = algbw * 2(n-1)/n.

Backend: nccl (RCCL on ROCm) on GPUs; gloo on CPU only when GPU_BROKER_SIMULATED=1, and the result says
so. Without GPUs and without that flag the script refuses to run: CPU numbers must never pass for GPU ones.

On a Slurm worker (worker/slurm/cli/job-wrapper.ts runs one copy of this script per node, with
NODE_RANK, WORLD_SIZE = nodes, MASTER_ADDR/MASTER_PORT) every copy starts one rank per GPU Slurm gave its
node; global rank = NODE_RANK * gpus-per-node + local rank, and the ranks meet at MASTER_ADDR:MASTER_PORT
when the job spans nodes. The document then records the job (id, nodes, per-node GPU indices) and each
rank's node, since the lease's card indexes are pool slots the job never sees.

On a MIG slice (GPU_BROKER_GPU_IDS names `<card>:mig:<gi>/<ci>`, docs/decisions/0046-mig-slices-as-cards.md)
the script runs (b) alone, in mode "gemm_only": CUDA shows a process one MIG device and all_reduce is not
offered across MIG instances, so no process group is started and no all_reduce or bandwidth is recorded.

Rank 0 writes one JSON document, qualification.json, into GPU_BROKER_OUTPUT_DIR. The master's verifier
recomputes every verdict from the numbers, so the `ok` flags here are for people reading logs.

Exit status: 0 every check passed; 1 a check failed (the JSON is still written); 2 the binding or the
host is unusable (no JSON); 3 a rank crashed (a JSON with `error` and no ranks is written if rank 0 had
not written one).
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import socket
import statistics
import sys
import time

SCHEMA_VERSION = 1
RESULT_FILE = "qualification.json"

# Defaults per device kind: the CPU sizes keep 8 simulated ranks on 2 shared cores within seconds;
# the GPU sizes are large enough for a meaningful TFLOP/s and a near-peak NVLink busbw.
DEFAULTS = {
    "gpu": {"gemm_n": 1024, "allreduce_bytes": 256 * 1024 * 1024, "warmup": 5, "iters": 20},
    "cpu": {"gemm_n": 256, "allreduce_bytes": 4 * 1024 * 1024, "warmup": 1, "iters": 5},
}
# Bound on the GEMM's normwise relative error, max|C - ref| / max|ref|. fp32 accumulation over
# K <= 8192 stays near 1e-6 of the largest entry; a wrong result is off by orders of magnitude more.
DEFAULT_TOLERANCE = 1e-4


class SetupError(Exception):
    """The binding or the host cannot run the qualification; reported with exit status 2."""


def parse_args(argv):
    p = argparse.ArgumentParser(description="gpu-broker qualification workload")
    p.add_argument("--gemm-n", type=int, default=None, help="GEMM size n (n x n by n x n)")
    p.add_argument("--allreduce-bytes", type=int, default=None, help="bytes of the timed all_reduce")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations before timing")
    p.add_argument("--iters", type=int, default=None, help="timed iterations (the median is reported)")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                   help="bound on the GEMM's max|C-ref|/max|ref|")
    p.add_argument("--timeout-s", type=int, default=300, help="collective timeout in seconds")
    args = p.parse_args(argv)
    for name, low in (("gemm_n", 1), ("allreduce_bytes", 4), ("warmup", 0), ("iters", 1), ("timeout_s", 1)):
        value = getattr(args, name)
        if value is not None and value < low:
            p.error(f"--{name.replace('_', '-')} must be at least {low}")
    if not (args.tolerance > 0 and math.isfinite(args.tolerance)):
        p.error("--tolerance must be a positive number")
    return args


def index_list(name, raw):
    """ "0,1,4" -> [0, 1, 4]; anything else (empty, ranges, duplicates) is a setup error."""
    try:
        ids = [int(x) for x in raw.split(",")]
    except ValueError:
        raise SetupError(f"{name}={raw!r} is not a comma-joined list of indexes")
    if len(set(ids)) != len(ids) or any(i < 0 for i in ids):
        raise SetupError(f"{name}={raw!r} has duplicate or negative indexes")
    return ids


MIG_INDEX_BASE = 256
MIG_LABEL = re.compile(r"^(\d{1,3}):mig:(\d{1,2})/(\d)$")


def card_list(name, raw):
    """ "0,1" or "0:mig:2/0" -> (indexes, labels, slices?): a slice's index is the broker's encoding
    256 + card*128 + gi*8 + ci, so the document binds to the lease's own card indexes."""
    labels = raw.split(",")
    if not any(MIG_LABEL.match(x) for x in labels):
        return index_list(name, raw), labels, False
    if len(labels) != 1:
        raise SetupError(f"{name}={raw!r}: a qualification rung on MIG slices holds exactly one slice")
    card, gi, ci = (int(x) for x in MIG_LABEL.match(labels[0]).groups())
    if card > 255 or gi > 14 or ci > 7:
        raise SetupError(f"{name}={raw!r} is not a MIG slice label")
    return [MIG_INDEX_BASE + card * 128 + gi * 8 + ci], labels, True


def read_slurm(env):
    """The Slurm job this copy runs in (one copy per node), or None outside a Slurm worker's job.

    A Slurm worker says so in GPU_BROKER_BACKEND (its lease names pool slots, not devices: the GPUs are
    the ones Slurm gave the job); its job wrapper exports NODE_RANK and WORLD_SIZE (= nodes, one copy per
    node) and the rendezvous.
    """
    if env.get("GPU_BROKER_BACKEND", "") != "slurm":
        return None
    def need(name):
        value = env.get(name, "")
        if value == "":
            raise SetupError(f"{name} is not set: in a Slurm job this script must be started by the "
                             "gpu-broker job wrapper")
        return value
    try:
        node_rank = int(need("NODE_RANK"))
        nnodes = int(need("WORLD_SIZE"))
        master_port = int(env.get("MASTER_PORT", "0") or "0")
    except ValueError:
        raise SetupError("NODE_RANK, WORLD_SIZE or MASTER_PORT is not an integer")
    if not 0 <= node_rank < nnodes:
        raise SetupError(f"NODE_RANK {node_rank} is outside 0..{nnodes - 1}")
    gpus_name = "SLURM_STEP_GPUS" if env.get("SLURM_STEP_GPUS", "") != "" else "SLURM_JOB_GPUS"
    gpus = index_list(gpus_name, need(gpus_name))
    if nnodes > 1 and (env.get("MASTER_ADDR", "") == "" or master_port <= 0):
        raise SetupError("MASTER_ADDR / MASTER_PORT are not set for a job on several nodes")
    return {
        "job_id": need("SLURM_JOB_ID"),
        "node": need("SLURMD_NODENAME"),
        "node_rank": node_rank,
        "nnodes": nnodes,
        "gpus": gpus,
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES") or None,
        "master_addr": env.get("MASTER_ADDR", ""),
        "master_port": master_port,
    }


def read_binding(env):
    """The ids the executor bound this run to; anything missing is a setup error, never a default."""
    def need(name):
        value = env.get(name, "")
        if value == "":
            raise SetupError(f"{name} is not set: this script must be started by the gpu-broker worker")
        return value

    slurm = read_slurm(env)
    raw_ids = None if slurm is not None else need("GPU_BROKER_GPU_IDS")
    gpu_ids, gpu_labels, mig = ([], [], False) if raw_ids is None else card_list("GPU_BROKER_GPU_IDS", raw_ids)
    try:
        lease_epoch = int(need("GPU_BROKER_LEASE_EPOCH"))
    except ValueError:
        raise SetupError("GPU_BROKER_LEASE_EPOCH is not an integer")
    uuids = env.get("GPU_BROKER_GPU_UUIDS", "")
    return {
        "task_id": need("GPU_BROKER_TASK_ID"),
        "execution_id": need("GPU_BROKER_EXECUTION_ID"),
        "assignment_id": need("GPU_BROKER_ASSIGNMENT_ID"),
        "lease_epoch": lease_epoch,
        "gpu_ids": gpu_ids,
        "gpu_labels": gpu_labels,
        "mig": mig,
        "gpu_uuids": uuids.split(",") if uuids else [],
        "worker_id": need("GPU_BROKER_WORKER_ID"),
        "output_dir": need("GPU_BROKER_OUTPUT_DIR"),
        "simulated": env.get("GPU_BROKER_SIMULATED", "") == "1",
        "slurm": slurm,
        # Ranks this copy starts, and how many there are in all.
        "local_n": len(slurm["gpus"]) if slurm else len(gpu_ids),
        "world": len(slurm["gpus"]) * slurm["nnodes"] if slurm else len(gpu_ids),
        "rank_offset": slurm["node_rank"] * len(slurm["gpus"]) if slurm else 0,
    }


def choose_device(torch, binding):
    """'cpu' (gloo) for simulated cards, 'gpu' (nccl) otherwise; refuses CPU for real cards."""
    n = binding["local_n"]
    if binding["simulated"]:
        # Simulated cards may sit on a host with real GPUs that belong to others: never touch them.
        return "cpu"
    if not torch.cuda.is_available():
        raise SetupError(
            "no CUDA/ROCm device is available and GPU_BROKER_SIMULATED is not 1: refusing to run the "
            "qualification on CPU, which would present CPU results as GPU results"
        )
    if not (os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("HIP_VISIBLE_DEVICES")):
        # Without a restricted visible set, cuda:0..N-1 need not be the leased cards.
        raise SetupError("CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES is not set to the leased cards")
    visible = torch.cuda.device_count()
    if visible != n:
        raise SetupError(f"{visible} devices are visible but the binding names {n} cards")
    return "gpu"


def free_port():
    # A short race with other programs is possible between close and rank 0's bind; it shows up as a
    # clear "address in use" failure, not as a wrong result.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def versions(torch, device_kind):
    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "nccl": None,
    }
    if device_kind != "gpu":
        # Simulated ranks are forked: touching CUDA here could leave a driver context to fork.
        return out
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - a missing NCCL version is recorded as unknown, not fatal
        out["nccl"] = None
    return out


def finite_or_none(x):
    # JSON has no NaN/Infinity; a non-finite measurement is recorded as null and fails its check.
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_allreduce_sum(torch, dist, rank, world, device):
    t = torch.tensor([float(rank + 1)], dtype=torch.float64 if device.type == "cpu" else torch.float32,
                     device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    value = t.item()
    expected = world * (world + 1) // 2
    ok = value == expected
    value_out = int(value) if math.isfinite(value) and value == int(value) else finite_or_none(value)
    print(f"[rank {rank}] all_reduce_sum value={value_out} expected={expected} {'ok' if ok else 'FAILED'}",
          flush=True)
    return {"value": value_out, "expected": expected, "ok": ok}


def check_gemm(torch, rank, device, n, warmup, iters, tolerance):
    gen = torch.Generator().manual_seed(1000 + rank)
    a_cpu = torch.randn(n, n, generator=gen, dtype=torch.float32)
    b_cpu = torch.randn(n, n, generator=gen, dtype=torch.float32)
    a, b = a_cpu.to(device), b_cpu.to(device)
    c = a @ b
    sync(torch, device)
    ref = a_cpu.double() @ b_cpu.double()
    diff = (c.double().cpu() - ref).abs().max().item()
    scale = ref.abs().max().item()
    max_abs = finite_or_none(diff)
    max_rel = finite_or_none(diff / scale) if scale > 0 else None
    for _ in range(warmup):
        a @ b
    sync(torch, device)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        a @ b
        sync(torch, device)
        times.append(time.perf_counter() - t0)
    median_s = statistics.median(times)
    tflops = 2.0 * n**3 / median_s / 1e12 if median_s > 0 else None
    ok = max_abs is not None and max_rel is not None and max_rel <= tolerance
    print(f"[rank {rank}] gemm n={n} max_abs_err={max_abs} max_rel_err={max_rel} tolerance={tolerance} "
          f"median_s={median_s:.6f} tflops={tflops} {'ok' if ok else 'FAILED'}", flush=True)
    return {"n": n, "max_abs_err": max_abs, "max_rel_err": max_rel, "tolerance": tolerance, "ok": ok,
            "median_s": median_s, "tflops": finite_or_none(tflops)}


def measure_bandwidth(torch, dist, rank, world, device, nbytes, warmup, iters):
    # float32 elements; the reported byte count is what was actually reduced.
    t = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=device)
    nbytes = t.numel() * t.element_size()
    for _ in range(warmup):
        dist.all_reduce(t)
    sync(torch, device)
    times = []
    for _ in range(iters):
        dist.barrier()
        sync(torch, device)
        t0 = time.perf_counter()
        dist.all_reduce(t)
        sync(torch, device)
        times.append(time.perf_counter() - t0)
    median_s = statistics.median(times)
    algbw = nbytes / median_s / 1e9
    # nccl-tests' bus bandwidth; at one rank no bytes cross a bus, so it is null rather than 0.
    busbw = algbw * 2 * (world - 1) / world if world > 1 else None
    print(f"[rank {rank}] allreduce_bandwidth bytes={nbytes} median_s={median_s:.6f} algbw_gbps={algbw:.3f} "
          f"busbw_gbps={'null (n=1)' if busbw is None else f'{busbw:.3f}'}", flush=True)
    return {"bytes": nbytes, "median_s": median_s, "algbw_gbps": algbw, "busbw_gbps": busbw}


def run_rank(local_rank, ctx):
    import torch
    import torch.distributed as dist

    world = ctx["world_size"]
    rank = ctx["rank_offset"] + local_rank
    on_gpu = ctx["device_kind"] == "gpu"
    if on_gpu:
        # A rank sees only its node's GPUs: its device is its local rank (the same as rank on one host).
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        # The check is of fp32 arithmetic; TF32 would fail the tolerance on correct hardware.
        torch.backends.cuda.matmul.allow_tf32 = False
        device_name = torch.cuda.get_device_name(local_rank)
    else:
        # Ranks share few cores; one thread each avoids oversubscription stalls.
        torch.set_num_threads(1)
        device = torch.device("cpu")
        device_name = f"cpu ({platform.processor() or platform.machine()}), simulated card"
    dist.init_process_group(
        backend=ctx["backend"],
        init_method=ctx["init_method"],
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=ctx["timeout_s"]),
    )
    try:
        p = ctx["params"]
        record = {
            "rank": rank,
            "device": str(device),
            "device_name": device_name,
            "allreduce_sum": check_allreduce_sum(torch, dist, rank, world, device),
            "gemm": check_gemm(torch, rank, device, p["gemm_n"], p["warmup"], p["iters"], p["tolerance"]),
            "bandwidth": measure_bandwidth(torch, dist, rank, world, device, p["allreduce_bytes"],
                                           p["warmup"], p["iters"]),
        }
        slurm = ctx["slurm"]
        if slurm is not None:
            record["node"] = slurm["node"]
            record["local_rank"] = local_rank
        # Each node's own view of its GPUs travels with its ranks' records, so rank 0 can write them all.
        node = None if slurm is None else {"node_rank": slurm["node_rank"], "node": slurm["node"],
                                            "gpus": slurm["gpus"],
                                            "cuda_visible_devices": slurm["cuda_visible_devices"]}
        gathered = [None] * world
        dist.all_gather_object(gathered, {"record": record, "node": node})
        if rank == 0:
            write_result(ctx, [g["record"] for g in gathered], nodes=[g["node"] for g in gathered])
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_gemm_only(torch, ctx):
    """A MIG slice: the GEMM on the one visible device, in this process; no process group."""
    if ctx["device_kind"] == "gpu":
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
        torch.backends.cuda.matmul.allow_tf32 = False
        device_name = torch.cuda.get_device_name(0)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
        device_name = f"cpu ({platform.processor() or platform.machine()}), simulated MIG slice"
    p = ctx["params"]
    record = {
        "rank": 0,
        "device": str(device),
        "device_name": device_name,
        "allreduce_sum": None,
        "gemm": check_gemm(torch, 0, device, p["gemm_n"], p["warmup"], p["iters"], p["tolerance"]),
        "bandwidth": None,
    }
    write_result(ctx, [record])


def write_result(ctx, records, error=None, nodes=()):
    ok = error is None and len(records) == ctx["world_size"] and all(
        (r["allreduce_sum"] is None or r["allreduce_sum"]["ok"]) and r["gemm"]["ok"] for r in records)
    doc = dict(ctx["document"])
    slurm = ctx["slurm"]
    if slurm is not None:
        # Node-rank order; a node is listed once, from what its own ranks saw.
        by_rank = {}
        for n in nodes:
            if n is not None:
                by_rank.setdefault(n["node_rank"], n)
        if not by_rank:  # no rank got as far as gathering: this copy's own view
            by_rank[slurm["node_rank"]] = slurm
        doc["slurm"] = {
            "job_id": slurm["job_id"],
            "nodes": [{"node": by_rank[i]["node"], "gpus": by_rank[i]["gpus"],
                       "cuda_visible_devices": by_rank[i]["cuda_visible_devices"]} for i in sorted(by_rank)],
        }
    doc.update({
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "device_names": [r["device_name"] for r in records],
        "ranks": records,
        "ok": ok,
        "error": error,
    })
    path = os.path.join(ctx["output_dir"], RESULT_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)  # readers never see half a document
    print(f"[rank 0] wrote {path} ok={ok}", flush=True)


def main(argv):
    args = parse_args(argv)
    try:
        binding = read_binding(os.environ)
        import torch
        device_kind = choose_device(torch, binding)
    except SetupError as e:
        print(f"qualify.py: {e}", file=sys.stderr, flush=True)
        return 2
    import torch.multiprocessing as mp

    d = DEFAULTS[device_kind]
    params = {
        "gemm_n": args.gemm_n or d["gemm_n"],
        "allreduce_bytes": args.allreduce_bytes or d["allreduce_bytes"],
        "warmup": d["warmup"] if args.warmup is None else args.warmup,
        "iters": args.iters or d["iters"],
        "tolerance": args.tolerance,
    }
    world = binding["world"]
    slurm = binding["slurm"]
    gemm_only = binding["mig"]
    # A MIG slice starts no process group (all_reduce is not offered across MIG instances).
    backend = "none" if gemm_only else "nccl" if device_kind == "gpu" else "gloo"
    os.makedirs(binding["output_dir"], exist_ok=True)
    # Without async error handling a dead NCCL peer hangs the others instead of timing out.
    os.environ.setdefault("NCCL_ASYNC_ERROR_HANDLING", "1")
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    document = {
        "schema_version": SCHEMA_VERSION,
        "task_id": binding["task_id"],
        "execution_id": binding["execution_id"],
        "assignment_id": binding["assignment_id"],
        "lease_epoch": binding["lease_epoch"],
        "gpu_ids": binding["gpu_ids"],  # empty on Slurm: see "slurm"
        "gpu_uuids": binding["gpu_uuids"],
        "gpu_labels": binding["gpu_labels"],
        "mode": "gemm_only" if gemm_only else "collective",
        "worker_id": binding["worker_id"],
        "hostname": socket.gethostname(),
        "backend": backend,
        "simulated": binding["simulated"],
        "world_size": world,
        "versions": versions(torch, device_kind),
        "visible_devices": {k: os.environ.get(k) for k in
                            ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")},
        "parameters": params,
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
    if slurm is not None and slurm["nnodes"] > 1:
        # Ranks on other nodes meet rank 0 at the wrapper's rendezvous (the first node, a port from the
        # job id). On one node a free local port avoids any clash with another job's derived port.
        init_method = f"tcp://{slurm['master_addr']}:{slurm['master_port']}"
    else:
        init_method = f"tcp://127.0.0.1:{free_port()}"
    ctx = {
        "world_size": world,
        "rank_offset": binding["rank_offset"],
        "slurm": slurm,
        "device_kind": device_kind,
        "backend": backend,
        "init_method": init_method,
        "timeout_s": args.timeout_s,
        "params": params,
        "document": document,
        "output_dir": binding["output_dir"],
    }
    path = os.path.join(binding["output_dir"], RESULT_FILE)
    where = "" if slurm is None else (f" slurm_job={slurm['job_id']} node={slurm['node']} "
                                      f"node_rank={slurm['node_rank']}/{slurm['nnodes']} gpus={slurm['gpus']}")
    print(f"qualify.py: world_size={world} backend={backend} simulated={binding['simulated']}{where} "
          f"params={json.dumps(params)}", flush=True)
    # CUDA cannot survive fork, so GPU ranks are spawned; CPU ranks are forked, which skips re-importing
    # torch in every rank (measured with 8 ranks on 2 cores: 1.7 s forked, 6.2 s spawned).
    start_method = "spawn" if device_kind == "gpu" else "fork"
    try:
        if gemm_only:
            print("qualify.py: a MIG slice: GEMM only (all_reduce is not offered across MIG instances)",
                  flush=True)
            run_gemm_only(torch, ctx)
        else:
            mp.start_processes(run_rank, args=(ctx,), nprocs=binding["local_n"], join=True,
                               start_method=start_method)
    except Exception as e:  # noqa: BLE001 - any rank failure ends the run with one clear status
        print(f"qualify.py: a rank failed: {e}", file=sys.stderr, flush=True)
        if binding["rank_offset"] == 0 and not os.path.exists(path):
            write_result(ctx, [], error=str(e)[:4000] or type(e).__name__)
        return 3
    if binding["rank_offset"] != 0:
        # Only rank 0 (on the first node) writes the document; this node's ranks all finished.
        print("qualify.py: this node's ranks finished", flush=True)
        return 0
    try:
        with open(path, encoding="utf-8") as f:
            ok = json.load(f).get("ok") is True
    except (OSError, ValueError) as e:
        print(f"qualify.py: cannot read back {path}: {e}", file=sys.stderr, flush=True)
        return 3
    print(f"qualify.py: {'all checks passed' if ok else 'a check FAILED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
