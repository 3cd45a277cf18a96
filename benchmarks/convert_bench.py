"""Benchmark the native converter on a GPT-J-shaped checkpoint: throughput and peak memory.

    python3 -m benchmarks.convert_bench [--hidden 1024 --layers 40 --vocab 8192] [--tp 2] [--workers 2]
                                        [--format safetensors|bin]

Makes the checkpoint (about 2.1 GB at the defaults; model.safetensors, or pytorch_model.bin as
torch.save writes it) in a temporary directory unless --checkpoint is given, converts it in a
child process and reports MB/s (checkpoint bytes per second) and the peak resident memory of
the converting processes (the largest one, from the kernel's rusage).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.gptj_checkpoint import to_pytorch_bin, write

ROOT = Path(__file__).resolve().parents[1]


_MEASURE = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def run(checkpoint: Path, out: Path, tp: int, dtype: str, workers: int) -> dict:
    """Convert in a fresh process tree and measure it: its largest process's peak RSS."""
    command = [sys.executable, "-m", "ftnative.convert", "-i", str(checkpoint), "-o", str(out), "--family", "gptj",
               "--tp", str(tp), "--weight-dtype", dtype, "--workers", str(workers), "--quiet"]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command], cwd=ROOT, check=True, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    seconds = time.monotonic() - started
    peak = int(done.stdout.strip().splitlines()[-1]) * 1024
    weights = next(p for p in (checkpoint / "model.safetensors", checkpoint / "pytorch_model.bin") if p.exists())
    size = weights.stat().st_size
    return {
        "format": "bin" if weights.suffix == ".bin" else "safetensors",
        "checkpoint_mb": round(size / 1e6, 1),
        "seconds": round(seconds, 2),
        "mb_per_s": round(size / 1e6 / seconds, 1),
        "peak_rss_mb": round(peak / 1e6, 1),
        "peak_rss_share": round(peak / size, 3),
        "tp": tp,
        "workers": workers,
        "weight_dtype": dtype,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, help="an existing GPT-J-shaped checkpoint directory")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=40)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--weight-dtype", default="fp32")
    parser.add_argument(
        "--format",
        choices=["safetensors", "bin"],
        default="safetensors",
        help="the checkpoint's weight file (made here; bin needs torch to write it)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as tmp:
        checkpoint = args.checkpoint or Path(tmp) / "hf"
        if not args.checkpoint:
            write(checkpoint, hidden=args.hidden, layers=args.layers, vocab=args.vocab)
            if args.format == "bin":
                to_pytorch_bin(checkpoint)
        print(json.dumps(run(checkpoint, Path(tmp) / "ft", args.tp, args.weight_dtype, args.workers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
