"""A stand-in training script for `gpu-broker run` (README "From code to result").

Runs anywhere (no torch needed): prints one line per epoch, writes metrics.json into the task's output
dir, and exits with --exit-code (default 0) so you can see `gpu-broker run` return it.
"""

import argparse
import json
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--exit-code", type=int, default=0)
args = parser.parse_args()

print("visible cards:", os.environ.get("CUDA_VISIBLE_DEVICES", "(none)"), flush=True)
loss = 1.0
for epoch in range(1, args.epochs + 1):
    loss *= 0.5
    print(f"epoch {epoch}/{args.epochs} loss {loss:.4f}", flush=True)
    time.sleep(0.2)

out = os.environ.get("GPU_BROKER_OUTPUT_DIR", ".")
with open(os.path.join(out, "metrics.json"), "w") as f:
    json.dump({"epochs": args.epochs, "loss": loss}, f)
    f.write("\n")
raise SystemExit(args.exit_code)
