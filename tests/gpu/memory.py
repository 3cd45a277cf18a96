"""The GPU memory plan against FT on a GPU (scripts/ft-gpu-check stack --steps memory): GPT-J-6B's
shape with random weights (perf.py's checkpoint and conversion), its fastertransformer model
served alone by tritonserver with the backend the recipe built, on a card made smaller by holding
the rest of its memory in this process first.

For each context C (the longest prompt + answer the gateway lets in), the max_batch_size that
preflight would allow on that card (ftdomain.ft.memory's plan within 90 % of it, as
preflight_gpu_memory_fraction) is served with a dynamic batcher that waits for a full batch, and
that many requests of C - 1 prompt tokens and 1 answer token (FT's peak: the context phase's
scores grow with the square of the prompt, the cache with the session) are sent at once. The
card's used memory (cudaMemGetInfo, the whole device) is read before tritonserver starts, once
it is ready and, sampled, while the batch runs: the plan's figure beside what FT took. Triton's
statistics show the requests ran as one batch. The requests go over Triton's HTTP/JSON protocol
(urllib: no client library on the GPU machine). Then the smallest max_batch_size whose plan passes
the whole card is served the same way: the plan says it fails.

    python3 tests/gpu/memory.py --tritonserver DIR --backends DIR --libs DIR... --repos DIR
        --device-root DIR --stub-python VENV [--card-mib 40960]
        [--contexts 2048,512] [--overhead-mib 1024] [--out DIR]

Writes memory-gptj-6b.json under --out and prints each measure as it is made.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import perf  # noqa: E402 - the checkpoint, its conversion and the perf set's config
import stack  # noqa: E402 - the real stack's servers

torch = stack.torch
SHAPE = "gptj-6b"
FRACTION = 0.9  # roles/preflight's preflight_gpu_memory_fraction
MIB = 1 << 20


def used_mib() -> float:
    free, total = torch.cuda.mem_get_info()
    return (total - free) / MIB


def planned(params: dict, batch: int, context: int, overhead: int) -> dict:
    from ftdomain.ft.memory import ft_memory_plan  # noqa: PLC0415

    options = {"data_type": "fp16", "max_batch_size": batch, "context": context, "overhead_mib": overhead}
    return ft_memory_plan("gptj", params, options)


def fits(params: dict, context: int, overhead: int, capacity: int) -> int:
    from ftdomain.ft.memory import ft_memory_fit  # noqa: PLC0415

    options = {"data_type": "fp16", "max_batch_size": 1, "context": context, "overhead_mib": overhead}
    return ft_memory_fit("gptj", params, options, capacity)["max_batch_size"]


def served_repo(work: Path, shards: Path, config_text: str, batch: int, name: str, *, delay_us: int = 5_000_000,
                int8_mode: int | None = None) -> Path:  # fmt: skip
    """The fastertransformer model alone, whole (not decoupled), max_batch_size `batch`, with a
    dynamic batcher that waits up to `delay_us` for a full batch (5 s: one batch of all that is
    sent at once); int8_mode, where given, replaces the config's."""
    repo = work / f"memory-{name}" / "repo"
    model = repo / "fastertransformer"
    model.mkdir(parents=True, exist_ok=True)
    if not (model / "1").exists():
        (model / "1").symlink_to(shards, target_is_directory=True)
    text = perf.variant_config(config_text, {"max_batch_size": batch, "delay_us": delay_us})
    lines = [line for line in text.splitlines() if "decoupled" not in line]
    if int8_mode is not None:
        at = [i for i, line in enumerate(lines) if '"int8_mode"' in line]
        if len(at) != 1:
            raise RuntimeError(f"config.pbtxt: expected one int8_mode parameter, found {len(at)}")
        lines[at[0]] = f'parameters {{ key: "int8_mode" value: {{ string_value: "{int8_mode}" }} }}'
    (model / "config.pbtxt").write_text("\n".join(lines) + "\n")
    return repo


def infer_json(base: str, ids: list[int], tokens: int, end_id: int, timeout: float = 300) -> dict:
    """One greedy request to the fastertransformer model over Triton's HTTP/JSON protocol (no
    client library needed on the GPU machine): its outputs by name."""
    one = lambda name, value: {"name": name, "shape": [1, 1], "datatype": "UINT32", "data": [value]}  # noqa: E731
    body = {"inputs": [{"name": "input_ids", "shape": [1, len(ids)], "datatype": "UINT32", "data": ids},
                       one("input_lengths", len(ids)), one("request_output_len", tokens), one("runtime_top_k", 1),
                       one("start_id", end_id), one("end_id", end_id)]}  # fmt: skip
    request = urllib.request.Request(f"{base}/v2/models/fastertransformer/infer", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return {o["name"]: o["data"] for o in json.loads(answer.read())["outputs"]}


def statistics(base: str) -> dict:
    with urllib.request.urlopen(f"{base}/v2/models/fastertransformer/stats", timeout=10) as answer:
        stats = json.loads(answer.read())["model_stats"][0]
    return {"inference_count": int(stats.get("inference_count", 0)),
            "execution_count": int(stats.get("execution_count", 0))}  # fmt: skip


def send_batch(base: str, batch: int, prompt: int, end_id: int) -> dict:
    """`batch` requests of `prompt` ids and one answer token, all at once; their outcome and
    Triton's statistics (one execution of `batch` inferences: one batch)."""
    done, lock = [], threading.Lock()

    def one(i: int) -> None:
        ids = [(7 * i + j) % 300 + 1 for j in range(prompt)]
        try:
            outcome = infer_json(base, ids, 1, end_id)["sequence_length"][0]
        except (OSError, ValueError, KeyError) as err:  # HTTP errors, a server gone: the answer too
            text = err.read().decode(errors="replace")[:300] if isinstance(err, urllib.error.HTTPError) else str(err)
            outcome = f"{type(err).__name__}: {text[:300]}"
        with lock:
            done.append(outcome)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(batch)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(320)
    seconds = round(time.monotonic() - began, 1)
    errors = [d for d in done if isinstance(d, str)]
    try:
        batching = statistics(base)
    except (OSError, ValueError) as err:  # the server may be gone: that is the answer too
        batching = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    return {"requests": batch, "answered": len(done) - len(errors), "errors": errors[:3],
            "error_count": len(errors), "seconds": seconds, "statistics": batching}  # fmt: skip


class Bench(NamedTuple):
    """What every case serves and measures with."""

    args: argparse.Namespace
    work: Path
    shards: Path
    config_text: str
    params: dict
    end_id: int
    before: float  # the card's used MiB before tritonserver starts (this process's hold included)


def serve_and_fill(bench: Bench, batch: int, context: int, name: str) -> dict:
    """tritonserver with max_batch_size `batch`, a full batch of context - 1 prompt tokens at once;
    the card's used memory (MiB, less bench.before) once ready and at the batch's peak (sampled
    every 20 ms), and what the log said of memory."""
    repo = served_repo(bench.work, bench.shards, bench.config_text, batch, name)
    found: dict = {"max_batch_size": batch, "context": context, "prompt": context - 1}
    log = None
    try:
        with stack.tritonserver(bench.args, repo, bench.work) as (base, _grpc, log):
            found["ready_mib"] = round(used_mib() - bench.before)
            peak, running = [used_mib()], threading.Event()
            running.set()

            def sample() -> None:
                while running.is_set():
                    peak.append(used_mib())
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                found["batch"] = send_batch(base, batch, context - 1, bench.end_id)
            finally:
                running.clear()
                sampler.join()
            found["peak_mib"] = round(max(peak) - bench.before)
            found["after_mib"] = round(used_mib() - bench.before)
    except RuntimeError as err:  # tritonserver gone: what it said is the result
        found["server_error"] = str(err)[-1500:]
    if log is not None and log.exists():
        lines = log.read_text(errors="replace").splitlines()
        found["log_memory_lines"] = [line[-300:] for line in lines if "memory" in line.lower()][-5:]
    return found


def fit_case(bench: Bench, context: int) -> dict:
    """The batch preflight allows on the pretended card at `context`, served and filled; the plan
    (with the runtime as given, and as measured once tritonserver is ready) beside the peak."""
    args = bench.args
    batch = fits(bench.params, context, args.overhead_mib, int(args.card_mib * FRACTION))
    plan = planned(bench.params, batch, context, args.overhead_mib)
    found = serve_and_fill(bench, batch, context, f"fit-{context}")
    found["plan_mib"] = plan["total_mib"]
    found["plan_parts_mib"] = {k: round(v / MIB) for k, v in plan["bytes"].items()}
    if "peak_mib" in found:
        runtime = found["ready_mib"] - round(plan["bytes"]["weights"] / MIB)
        measured = planned(bench.params, batch, context, max(runtime, 0))["total_mib"]
        found["runtime_measured_mib"] = runtime
        found["plan_with_measured_runtime_mib"] = measured
        found["plan_over_peak"] = round(plan["total_mib"] / found["peak_mib"], 3)
        found["measured_plan_over_peak"] = round(measured / found["peak_mib"], 3)
    return found


def shards_of(args, shape: str) -> tuple[Path, Path, dict]:
    """The shape's checkpoint (perf.py's, made once on this machine) and its repository of the perf
    set with converted shards, the GPU left empty: (checkpoint, repository, conversion record)."""
    ckpt = Path(str(args.device_root)) / "ckpt" / perf.SHAPES[shape][0]
    model, _weight_bytes, made_s = perf.checkpoint_made(shape, ckpt)
    del model
    torch.cuda.empty_cache()
    repo, convert = perf.converted_repo(args, shape, made_s is None)
    return ckpt, repo, convert


def server_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments every script serving the perf set alone takes (ft-gpu-check passes them)."""
    parser = argparse.ArgumentParser(description=description.split("\n\n", maxsplit=1)[0])
    for name in ("--tritonserver", "--backends", "--repos", "--device-root", "--stub-python"):
        parser.add_argument(name, type=Path, required=True)
    parser.add_argument("--libs", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path, default=None)
    return parser


def main() -> int:
    parser = server_arguments(__doc__)
    parser.add_argument("--card-mib", type=int, default=40960, help="the card to pretend (MiB free for tritonserver)")
    parser.add_argument("--contexts", default="2048,512", help="the longest prompt + answer, comma-separated")
    parser.add_argument("--overhead-mib", type=int, default=1024, help="preflight_gpu_overhead_mib")
    args = parser.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    from ftdomain.ft.model import ft_model_params  # noqa: PLC0415

    root = Path(str(args.device_root))
    work = root / "memory-work"
    work.mkdir(parents=True, exist_ok=True)
    ckpt, repo, convert = shards_of(args, SHAPE)
    free, total = torch.cuda.mem_get_info()
    result = {"shape": SHAPE, "card": torch.cuda.get_device_name(0), "card_mib": round(total / MIB),
              "pretended_mib": args.card_mib, "fraction": FRACTION, "overhead_mib": args.overhead_mib,
              "convert": convert}  # fmt: skip
    # The smaller card: hold all but card_mib of what is free, in this process.
    hold = torch.empty(max(0, free - args.card_mib * MIB), dtype=torch.uint8, device="cuda")
    bench = Bench(args=args, work=work, shards=repo / "fastertransformer" / "1",
                  config_text=(repo / "fastertransformer" / "config.pbtxt").read_text(),
                  params=ft_model_params(json.loads((ckpt / "config.json").read_text()), "gptj"),
                  end_id=perf.lab_vocab()[1], before=used_mib())  # fmt: skip
    result["free_mib_after_hold"] = round(total / MIB - bench.before)
    print(json.dumps(result), flush=True)
    result["cases"] = []
    for context in contexts:
        result["cases"].append(fit_case(bench, context))
        print(json.dumps(result["cases"][-1]), flush=True)
    # One size past: the smallest batch whose plan passes the whole pretended card, at the first context.
    past = fits(bench.params, contexts[0], args.overhead_mib, args.card_mib) + 1
    result["past"] = serve_and_fill(bench, past, contexts[0], f"past-{contexts[0]}")
    result["past"]["plan_mib"] = planned(bench.params, past, contexts[0], args.overhead_mib)["total_mib"]
    print(json.dumps(result["past"]), flush=True)
    del hold
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"memory-{SHAPE}.json").write_text(json.dumps(result, indent=1) + "\n")
    answered = all(case.get("batch", {}).get("answered") == case["max_batch_size"] for case in result["cases"])
    return 0 if answered else 1


if __name__ == "__main__":
    sys.exit(main())
