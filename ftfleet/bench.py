"""Benchmark the serving path layer by layer: latency (p50, p95, p99), time to the first token
and throughput at several concurrencies, through HAProxy, through every host's gateway in turn
(what HAProxy balances: the difference is HAProxy's), through one gateway, and straight to that
host's tritonserver (the ensemble over gRPC streaming); and, as the tutorial's "before", transformers'
generate() in one process on the same machine.

    ftfleet bench                      # the lab (make lab first); make bench does both
    ftfleet bench --front http://lb-01:8090 --gateway http://gpu-a100-01:8080 \\
        --gateways http://gpu-a100-01:8080,http://gpu-a100-02:8080 \\
        --triton-grpc 127.0.0.1:18001 --key "$KEY" --model kogpt --no-baseline
                                       # after ssh -N -L 18001:127.0.0.1:8001 gpu-a100-01 (tritonserver
                                       # listens on loopback behind the gateway: docs/operations.md)

Every request streams (stream: true, greedy, the same prompt and max_tokens), so the first text
chunk gives the time to the first token, the mean time between text chunks the inter-token
latency, and the last the latency. Writes the numbers as JSON, a
Markdown table and a PNG plot (--out). Requests stay bounded: --requests per target and level.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import platform
import queue
import ssl
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

ROOT = Path(__file__).resolve().parent.parent  # not ftfleet.events': a GPU machine runs this without PyYAML

LAB_KEY = "ftf-lab-key-not-a-secret-0001"  # inventories/lab/group_vars/gpu_hosts/gateway.yml


def openai_request(url: str, key: str, model: str, prompt: str, tokens: int) -> Callable[[], tuple[float, float]]:
    """One streamed completion through an OpenAI-compatible endpoint: (first text, end, mean time
    between text chunks) in seconds. Several URLs (comma-separated) take the calls in turn.

    The client is the standard library's http.client, one kept-alive connection per thread and
    URL (as the Triton layer keeps its gRPC stream, and as OpenAI's clients keep theirs): on a
    machine where the client shares the cores with the servers, its own CPU is taken from theirs,
    and httpx (what the openai package uses) costs about three times as much per streamed request
    (3.7 against 1.2 ms, docs/performance.md), which was charged to the layers under test."""
    targets, turn = [urlsplit(u) for u in url.split(",")], itertools.count()
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True})
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    local, made = threading.local(), []

    def connection(target) -> http.client.HTTPConnection:
        kept = local.__dict__.setdefault("connections", {})
        if target.netloc not in kept:
            kept[target.netloc] = (
                http.client.HTTPSConnection(target.netloc, timeout=300, context=ssl.create_default_context())
                if target.scheme == "https" else http.client.HTTPConnection(target.netloc, timeout=300)
            )  # fmt: skip
            made.append(kept[target.netloc])
        return kept[target.netloc]

    def answer(target) -> http.client.HTTPResponse:
        conn, path = connection(target), f"{target.path.rstrip('/')}/v1/completions"
        try:
            conn.request("POST", path, body=body, headers=headers)
            return conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conn.close()  # the server closed the kept connection while it was idle: once more, afresh
            conn.request("POST", path, body=body, headers=headers)
            return conn.getresponse()

    def call() -> tuple[float, float]:
        began, first, last, texts = time.perf_counter(), None, None, 0
        response = answer(targets[next(turn) % len(targets)])
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:200]!r}")
        while line := response.readline():  # each server-sent event as it arrives (chunked)
            if line.startswith(b"data: {") and b'"text": ""' not in line:
                last, texts = time.perf_counter() - began, texts + 1
                first = last if first is None else first
        end = time.perf_counter() - began
        return (first if first is not None else end), end, _gap(first, last, texts)

    call.close = lambda: [c.close() for c in made]  # type: ignore[attr-defined]
    return call


def grpc_stream_request(address: str, model: str, inputs: Callable[[], list], output: str,
                        last: Callable[[Any], None] | None = None) -> Callable[[], tuple]:  # fmt: skip
    """One request to `model` over gRPC streaming (decoupled models answer only so): (first
    response carrying `output`, end, mean gap between those responses) in seconds. `inputs`
    makes the request's tensors; `last`, if given, gets the last response that carried `output`.
    Each thread keeps its client and stream."""
    import tritonclient.grpc as grpcclient  # noqa: PLC0415 - only the Triton layers need it

    local, made = threading.local(), []

    def call() -> tuple:
        if not hasattr(local, "client"):
            answers: queue.Queue = queue.Queue()  # filled on the stream's own thread, where `local` is empty
            local.answers, local.client = answers, grpcclient.InferenceServerClient(address)
            local.client.start_stream(callback=lambda result, error: answers.put((result, error)))
            made.append(local.client)
        began, first, latest, texts, kept = time.perf_counter(), None, None, 0, None
        local.client.async_stream_infer(model, inputs(), enable_empty_final_response=True)
        while True:
            result, error = local.answers.get(timeout=300)
            if error is not None:
                raise RuntimeError(str(error))
            final = result.get_response().parameters.get("triton_final_response")
            if result.as_numpy(output) is not None:
                latest, texts, kept = time.perf_counter() - began, texts + 1, result
                first = latest if first is None else first
            if final is not None and final.bool_param:
                if last is not None and kept is not None:
                    last(kept)
                end = time.perf_counter() - began
                return (first or end), end, _gap(first, latest, texts)

    def close() -> None:
        for client in made:
            client.stop_stream()
            client.close()

    call.close = close  # type: ignore[attr-defined]
    return call


def triton_request(address: str, prompt: str, tokens: int) -> Callable[[], tuple[float, float]]:
    """One request to the ensemble over gRPC streaming, text in."""
    import tritonclient.grpc as grpcclient  # noqa: PLC0415 - only this layer needs it

    def inputs() -> list:
        made = []
        for name, value, dtype in (("INPUT_0", prompt.encode(), object), ("INPUT_1", tokens, np.uint32),
                                   ("INPUT_2", b"", object), ("INPUT_3", b"", object)):  # fmt: skip
            tensor = grpcclient.InferInput(name, [1, 1], "BYTES" if dtype is object else "UINT32")
            tensor.set_data_from_numpy(np.array([[value]], dtype=dtype))
            made.append(tensor)
        return made

    return grpc_stream_request(address, "ensemble", inputs, "OUTPUT_0")


def _gap(first: float | None, last: float | None, texts: int) -> float | None:
    """The inter-token latency of one streamed answer: the mean time between its text chunks."""
    return (last - first) / (texts - 1) if first is not None and last is not None and texts > 1 else None


class Level:
    """One layer at one concurrency: `concurrency` threads kept for the level's rounds (each keeps its
    connection, as a client does), and the samples of every round."""

    def __init__(self, call: Callable[[], tuple], concurrency: int) -> None:
        self.call, self.concurrency = call, concurrency
        self.pool = ThreadPoolExecutor(concurrency)
        self.samples: list[tuple] = []
        self.errors: list[str] = []
        self.wall = self.cpu = 0.0
        # Warm up every thread (its connection or stream, the model's first pass): not measured.
        ready = threading.Barrier(concurrency)  # each warm-up call holds its thread: one on each

        def warm(_: int) -> None:
            try:
                self.call()  # a layer that cannot answer at all stops the benchmark here
            finally:
                ready.wait(timeout=300)

        list(self.pool.map(warm, range(concurrency)))

    def _one(self) -> tuple | str:
        try:
            return self.call()
        except Exception as err:  # counted and reported; the level goes on
            return f"{type(err).__name__}: {err}"

    def round(self, requests: int) -> None:
        """`requests` calls over the threads; the wall time counts to the last answer."""
        began, cpu = time.perf_counter(), time.process_time()  # this process's: the client's own CPU
        answers = list(self.pool.map(lambda _: self._one(), range(requests)))
        self.wall += time.perf_counter() - began
        self.cpu += time.process_time() - cpu
        self.samples += [a for a in answers if not isinstance(a, str)]
        self.errors += [a for a in answers if isinstance(a, str)]

    def summary(self) -> dict:
        """Percentiles over the calls, throughput over the rounds' wall time."""
        self.pool.shutdown()
        latency = sorted(s[1] for s in self.samples)
        first = sorted(s[0] for s in self.samples)
        gaps = sorted(s[2] for s in self.samples if s[2] is not None)
        pct = lambda xs, p: round(1000 * float(np.percentile(xs, p)), 1) if xs else None  # noqa: E731
        return {"concurrency": self.concurrency, "requests": len(self.samples), "errors": len(self.errors),
                "error_kinds": self.errors[:3], "p50_ms": pct(latency, 50), "p95_ms": pct(latency, 95),
                "p99_ms": pct(latency, 99), "ttft_p50_ms": pct(first, 50), "ttft_p95_ms": pct(first, 95),
                "ttft_p99_ms": pct(first, 99), "itl_p50_ms": pct(gaps, 50), "itl_p95_ms": pct(gaps, 95),
                "itl_p99_ms": pct(gaps, 99),
                "requests_per_s": round(len(self.samples) / self.wall, 2) if self.wall else None,
                "client_cpu_ms": round(1000 * self.cpu / len(self.samples), 2) if self.samples else None}  # fmt: skip


def run_levels(layers: dict[str, Callable[[], tuple]], levels: list[int], requests: int, rounds: int) -> dict:
    """Every layer at every concurrency. A level's requests go in `rounds` rounds, the layers taking
    turns in an order that rotates each round, so that whatever else the machine does at the time
    (a shared machine drifts by 10-30% within minutes) falls on every layer alike, and the
    layers' differences are their own. A round has at least two requests per thread."""
    results: dict[str, list[dict]] = {name: [] for name in layers}
    for concurrency in levels:
        per_round = max(-(-requests // rounds), 2 * concurrency)
        measured = {name: Level(call, concurrency) for name, call in layers.items()}
        names = list(layers)
        for turn in range(rounds):
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                measured[name].round(per_round)
        for name, level in measured.items():
            results[name].append(level.summary())
            print(json.dumps({name: results[name][-1]}), flush=True)
    return results


def baseline(checkpoint: Path, prompt: str, tokens: int, requests: int) -> dict:
    """The tutorial's before: transformers' greedy generate() in this process, one request at a time."""
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    ids = torch.tensor([tokenizer.encode(prompt)])
    times = []
    with torch.no_grad():
        for _ in range(requests):
            began = time.perf_counter()
            model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                           pad_token_id=tokenizer.eos_token_id)  # fmt: skip
            times.append(time.perf_counter() - began)
    times.sort()
    return {"concurrency": 1, "requests": len(times), "errors": 0, "error_kinds": [],
            "p50_ms": round(1000 * statistics.median(times), 1),
            "p95_ms": round(1000 * float(np.percentile(times, 95)), 1),
            "p99_ms": round(1000 * float(np.percentile(times, 99)), 1), "ttft_p50_ms": None, "itl_p50_ms": None,
            "requests_per_s": round(len(times) / sum(times), 2)}  # fmt: skip


def lab_checkpoint(work: Path) -> Path:
    """The lab's model as `make lab` published it (a git repository with LFS objects)."""
    checkout = work / "tiny-gpt2"
    subprocess.run(["git", "clone", "-q", "file:///var/tmp/ftfleet-lab/tiny-gpt2.git", str(checkout)], check=True)
    return checkout


def write(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "serving.json").write_text(json.dumps(results, indent=2) + "\n")
    rows = ["| layer | concurrency | requests | errors | p50 ms | p95 ms | p99 ms | first token p50 ms "
            "| between tokens p50 ms | requests/s | client CPU ms per request |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for layer, levels in results["layers"].items():
        for r in levels:
            first = r["ttft_p50_ms"] if r["ttft_p50_ms"] is not None else "-"
            gap = r.get("itl_p50_ms") if r.get("itl_p50_ms") is not None else "-"
            rows.append(f"| {layer} | {r['concurrency']} | {r['requests']} | {r['errors']} | {r['p50_ms']} | "
                        f"{r['p95_ms']} | {r['p99_ms']} | {first} | {gap} | {r['requests_per_s']} | "
                        f"{r.get('client_cpu_ms', '-')} |")  # fmt: skip
    (out / "serving.md").write_text("\n".join(rows) + "\n")
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for layer, levels in results["layers"].items():
        xs = [r["concurrency"] for r in levels]
        left.plot(xs, [r["p50_ms"] for r in levels], marker="o", label=layer)
        right.plot(xs, [r["requests_per_s"] for r in levels], marker="o", label=layer)
    for axis, title in ((left, "p50 latency (ms)"), (right, "throughput (requests/s)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrent clients")
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    fig.suptitle(f"{results['model']}, {results['tokens']} tokens, greedy, streamed ({results['machine']})")
    fig.tight_layout()
    fig.savefig(out / "serving.png", dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ftfleet bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--front", default="http://127.0.0.1:18500", help="HAProxy's frontend ('' to skip)")
    parser.add_argument("--gateway", default="http://127.0.0.1:18080", help="one host's gateway ('' to skip)")
    parser.add_argument("--gateways", default="http://127.0.0.1:18080,http://127.0.0.1:18180",
                        help="every host's gateway behind --front, comma-separated, asked in turn: what HAProxy "
                             "balances, so that the two layers differ only by HAProxy ('' to skip)")  # fmt: skip
    parser.add_argument("--triton-grpc", default="127.0.0.1:18001", help="that host's tritonserver gRPC ('' to skip)")
    parser.add_argument("--key", default=LAB_KEY)
    parser.add_argument("--model", default="tiny-gpt2")
    parser.add_argument("--prompt", default="Every role")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--requests", type=int, default=96, help="requests per layer and concurrency")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per concurrency, the layers taking turns")
    parser.add_argument("--no-baseline", action="store_true", help="skip transformers' generate() in this process")
    parser.add_argument("--out", default=str(ROOT / "docs" / "bench"))
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    layers: dict[str, Callable[[], tuple[float, float]]] = {}
    if args.front:
        layers["HAProxy -> gateway -> Triton"] = openai_request(
            args.front, args.key, args.model, args.prompt, args.tokens
        )
    if args.gateways:
        layers["every host's gateway in turn"] = openai_request(
            args.gateways, args.key, args.model, args.prompt, args.tokens
        )
    if args.gateway:
        layers["gateway -> Triton"] = openai_request(args.gateway, args.key, args.model, args.prompt, args.tokens)
    if args.triton_grpc:
        layers["Triton (ensemble, gRPC)"] = triton_request(args.triton_grpc, args.prompt, args.tokens)
    machine = f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores"
    results = {"model": args.model, "tokens": args.tokens, "prompt": args.prompt, "date": time.strftime("%Y-%m-%d"),
               "machine": machine, "layers": {}}  # fmt: skip
    try:
        results["layers"] = run_levels(layers, levels, args.requests, args.rounds)
    finally:
        for call in layers.values():
            call.close()  # its connections and streams (open ones kept the process from exiting)
    if not args.no_baseline:
        with tempfile.TemporaryDirectory() as work:
            results["layers"]["transformers generate(), one process"] = [
                baseline(lab_checkpoint(Path(work)), args.prompt, args.tokens, min(args.requests, 16))
            ]
    write(results, Path(args.out))
    print(f"ftfleet bench: wrote {args.out}/serving.json, serving.md, serving.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
