"""Rounds measured on the GPU (scripts/ft-gpu-check stack --steps rounds --slice S): GPT-J-6B's shape
(random fp16 weights, perf.py's checkpoint and conversion), served by one tritonserver with prod's
serving settings for the fastertransformer model (decoupled, dynamic batching with a 10 ms queue
delay, max_batch_size 64), and two gateways in front of it, rounds off (slice_tokens 0) and on
(slice_tokens S), each with prod's admission (64 slots). GuideLLM (tests/gpu/guidellm_run.py)
measures each scenario through one gateway and then the other:

- closed loop: 1, 4, 16 and 64 clients, 128/128;
- mixed answers: 16 and 64 clients, prompts of 128 tokens, answers of 16 to 512 (GuideLLM's
  synthetic lengths: mean 264, stdev 160, clipped);
- arrivals at random times (Poisson) at half and nine tenths of the capacity this run finds (the
  requests/s of rounds off at 64 clients), 128/128 and 512/256.

Each scenario also reads Triton's model statistics before and after (inference_count against
execution_count: how many requests each FT batch held) and the gateway's metrics (rounds, their
slices). Writes rounds.json under --out as it goes (a partial run keeps what it measured);
GuideLLM's own reports stay under --device-root (rounds/reports).

    python3 tests/gpu/rounds.py --tritonserver DIR --backends DIR --libs DIR... --repos DIR
        --device-root DIR --stub-python VENV --gateway-python VENV --gateway-app ZIP --guidellm VENV
        --slice 32 [--scenarios closed,mixed,poisson] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import guidellm_run  # noqa: E402
import perf  # noqa: E402 - the checkpoint, its conversion and the config's variants
import stack  # noqa: E402

SHAPE = "gptj-6b"
PROD = {"max_batch_size": 64, "delay_us": 10000}  # inventories/prod's serving settings
MIXED = "prompt_tokens=128,output_tokens=264,output_tokens_stdev=160,output_tokens_min=16,output_tokens_max=512"


def served(repo: Path, work: Path) -> Path:
    """The perf set's repository with prod's fastertransformer config (the shards linked, not copied)."""
    dest = work / "rounds-repo"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(repo, dest, ignore=lambda where, _names: ["1"] if Path(where).name == "fastertransformer" else [])
    (dest / "fastertransformer" / "1").symlink_to(repo / "fastertransformer" / "1", target_is_directory=True)
    config = dest / "fastertransformer" / "config.pbtxt"
    config.write_text(perf.variant_config(config.read_text(), PROD))
    # An ensemble may not allow a larger batch than a model it contains
    ensemble = dest / "ensemble" / "config.pbtxt"
    if ensemble.exists():
        ensemble.write_text(perf.variant_config(ensemble.read_text(), {"max_batch_size": PROD["max_batch_size"]}))
    return dest


def triton_stats(http: str) -> dict:
    """The fastertransformer model's requests and batches so far (Triton's statistics extension)."""
    with urllib.request.urlopen(f"{http}/v2/models/fastertransformer/stats", timeout=10) as answer:
        stats = json.load(answer)["model_stats"][0]
    return {"requests": int(stats.get("inference_count", 0)), "batches": int(stats.get("execution_count", 0))}


def gateway_rounds(url: str) -> dict:
    """The gateway's round metrics so far: rounds, their slices, their seconds."""
    with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = {}
    for line in text.splitlines():
        for name, key in (("ftgateway_round_slices_count ", "rounds"), ("ftgateway_round_slices_sum ", "slices"),
                          ("ftgateway_round_seconds_sum ", "round_seconds"), ("ftgateway_good_total ", "good"),
                          ("ftgateway_slots_lent_total ", "lent")):  # fmt: skip
            if line.startswith(name):
                found[key] = float(line.split()[1])
    return found


def difference(after: dict, before: dict) -> dict:
    return {key: round(after[key] - before.get(key, 0), 3) for key in after}


class Runs:
    """The scenarios through both gateways, each result written to rounds.json as it comes."""

    def __init__(self, args, http: str, gateways: dict[str, str], out: Path, *, tokenizer: Path, reports: Path) -> None:
        self.args, self.http, self.gateways, self.out, self.tokenizer = args, http, gateways, out, tokenizer
        # GuideLLM's reports and logs, two per scenario and gateway, stay beside the work: the
        # device tool brings back a limited number of files from --out, which rounds.json keeps whole.
        self.reports = reports
        self.found: dict = {"slice_tokens": args.slice, "settings": PROD, "scenarios": {}}

    def save(self) -> None:
        (self.out / "rounds.json").write_text(json.dumps(self.found, indent=1) + "\n")

    def one(self, name: str, *, profile: str, data: str, requests: int) -> dict:
        """One scenario through each gateway: GuideLLM's summary, Triton's batches, the rounds."""
        results = {}
        for mode, url in self.gateways.items():
            report = self.reports / f"rounds-{name}-{mode}.json"
            triton_before, rounds_before = triton_stats(self.http), gateway_rounds(url)
            argv = guidellm_run.command(self.args.guidellm, target=url.removesuffix("/v1"), model="gptj",
                                        tokenizer=self.tokenizer, profile=profile, data=data, requests=requests,
                                        report=report)  # fmt: skip
            began = time.monotonic()
            levels = guidellm_run.execute(argv, report, self.reports / f"rounds-{name}-{mode}.log")
            batches = difference(triton_stats(self.http), triton_before)
            results[mode] = {**levels[0], "seconds": round(time.monotonic() - began, 1), "triton": batches,
                             "requests_per_batch": round(batches["requests"] / max(1, batches["batches"]), 2),
                             "rounds": difference(gateway_rounds(url), rounds_before), "argv": argv[1:]}  # fmt: skip
            print(json.dumps({"scenario": name, "mode": mode, **{k: v for k, v in results[mode].items()
                                                                  if k != "argv"}}), flush=True)  # fmt: skip
        self.found["scenarios"][name] = results
        self.save()
        return results

    def closed(self, clients: int, lengths: tuple[int, int] = (128, 128)) -> dict:
        data = f"prompt_tokens={lengths[0]},output_tokens={lengths[1]}"
        return self.one(f"closed-{lengths[0]}-{lengths[1]}-c{clients}", profile=f"kind=concurrent,streams={clients}",
                        data=data, requests=max(8, 2 * clients))  # fmt: skip

    def poisson(self, lengths: tuple[int, int], share: float, capacity: float) -> dict:
        rate = round(share * capacity, 2)
        self.found.setdefault("capacity_requests_per_s", {})[f"{lengths[0]}/{lengths[1]}"] = capacity
        return self.one(f"poisson-{lengths[0]}-{lengths[1]}-{share}", profile=f"kind=poisson,rate={rate}",
                        data=f"prompt_tokens={lengths[0]},output_tokens={lengths[1]}",
                        requests=max(16, int(rate * 12)))  # fmt: skip

    def mixed(self, clients: int) -> dict:
        return self.one(f"mixed-c{clients}", profile=f"kind=concurrent,streams={clients}", data=MIXED,
                        requests=2 * clients)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("--tritonserver", "--backends", "--repos", "--device-root", "--stub-python", "--gateway-python",
                 "--gateway-app", "--guidellm"):  # fmt: skip
        parser.add_argument(name, type=Path, required=True)
    parser.add_argument("--libs", type=Path, nargs="+", required=True)
    parser.add_argument("--slice", type=int, default=32, help="the rounds-on gateway's slice_tokens")
    parser.add_argument("--scenarios", default="closed,mixed,poisson")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    scenarios = args.scenarios.split(",")
    root = Path(str(args.device_root))
    ckpt = root / "ckpt" / "gptj"
    model, _weight_bytes, _made_s = perf.checkpoint_made(SHAPE, ckpt)
    if model is not None:
        del model
    repo, _record = perf.converted_repo(args, SHAPE, reused=(root / f"perf-convert-{SHAPE}.json").exists())
    work = root / "rounds"
    work.mkdir(parents=True, exist_ok=True)
    with stack.tritonserver(args, served(repo, work), work) as (http, grpc, _log):
        target = stack.Target("gptj", grpc, ckpt, work)
        common = {"context_length": 2048, "max_tokens_limit": 512, "request_timeout_s": 600.0, "max_in_flight": 64,
                  "admission_queue": 1024, "admission_wait_ms": 600000}  # fmt: skip
        with stack.gateway(args, target, local=True, slice_tokens=0, **common) as (off, _l1), \
             stack.gateway(args, target, local=True, slice_tokens=args.slice, **common) as (on, _l2):  # fmt: skip
            reports = work / "reports"
            reports.mkdir(exist_ok=True)
            runs = Runs(args, http, {"off": off, "on": on}, args.out, tokenizer=ckpt, reports=reports)
            capacity = {}
            if "closed" in scenarios:
                for clients in (1, 16, 64, 4):
                    found = runs.closed(clients)
                    if clients == 64:
                        capacity[(128, 128)] = found["off"]["requests_per_s"]
            if "mixed" in scenarios:
                for clients in (16, 64):
                    runs.mixed(clients)
            if "poisson" in scenarios:
                if (128, 128) not in capacity:
                    capacity[(128, 128)] = runs.closed(64)["off"]["requests_per_s"]
                for share in (0.5, 0.9):
                    runs.poisson((128, 128), share, capacity[(128, 128)])
                capacity[(512, 256)] = runs.closed(64, (512, 256))["off"]["requests_per_s"]
                for share in (0.5, 0.9):
                    runs.poisson((512, 256), share, capacity[(512, 256)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
