"""GuideLLM (a standard serving benchmark, from PyPI) against an OpenAI-compatible front: the
gateway, here. One `guidellm run` per prompt/answer length: synthetic prompts of exactly that many
tokens of the model's own tokenizer, answers asked for exactly that many (GuideLLM sends vLLM's
ignore_eos, which the gateway honours), then at each concurrency its own `guidellm run` of the
concurrent profile with REQUESTS_PER_STREAM requests per stream (at least MIN_REQUESTS: a count,
never a duration, so that the figures compare across layers by request). Each JSON report is kept
whole; summary() reads from it what docs/performance.md tabulates: requests/s, output tokens/s,
time to first token and inter-token latency p50/p95/p99, and the requests that errored or came
back short.

    python3 tests/gpu/guidellm_run.py --guidellm VENV --target http://127.0.0.1:PORT --model NAME
        --tokenizer DIR --lengths 512/256 --concurrency 1,4,16,64 --out DIR

perf.py calls run() with the gateway it started (perf.py --guidellm VENV)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REQUESTS_PER_STREAM, MIN_REQUESTS = 2, 8


def command(guidellm: Path, *, target: str, model: str, tokenizer: Path, profile: str, data: str, requests: int,
            report: Path, api_key: str = "") -> list[str]:  # fmt: skip
    """The `guidellm run` command line (guidellm 0.8's kind=... options): `profile` (its
    --profile: concurrent streams, a Poisson rate) over `data` (its synthetic text's lengths),
    for `requests` requests."""
    backend = f"kind=openai_http,target={target},model={model},request_format=/v1/completions"
    if api_key:
        backend += f",api_key={api_key}"
    return [
        str(guidellm / "bin" / "guidellm"), "run",
        "--backend", backend,
        "--profile", profile,
        "--data", f"kind=synthetic_text,{data}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
        "--constraint", f"kind=max_requests,count={requests}",
        "--output", f"kind=json,path={report}",
        "--disable-progress",
    ]  # fmt: skip


def execute(argv: list[str], report: Path, log: Path) -> list[dict]:
    """One `guidellm run`: its report's summaries; raises with GuideLLM's own words when it fails."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    with log.open("w") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=1800, check=False)
    if done.returncode != 0 or not report.exists():
        raise RuntimeError(f"guidellm failed ({done.returncode}):\n{log.read_text(errors='replace')[-4000:]}")
    return summary(json.loads(report.read_text()))


def run(guidellm: Path, *, target: str, model: str, tokenizer: Path, prompt_tokens: int, output_tokens: int,
        concurrency: list[int], work: Path, api_key: str = "") -> dict:  # fmt: skip
    """`guidellm run` at one length, once per concurrency: the levels' summaries, the commands and
    where the whole reports are. Raises with GuideLLM's own words when a run fails."""
    found = {"commands": [], "reports": [], "seconds": 0.0, "levels": []}
    for streams in concurrency:
        name = f"guidellm-{prompt_tokens}-{output_tokens}-c{streams}"
        report = work / f"{name}.json"
        argv = command(guidellm, target=target, model=model, tokenizer=tokenizer,
                       profile=f"kind=concurrent,streams={streams}",
                       data=f"prompt_tokens={prompt_tokens},output_tokens={output_tokens}",
                       requests=max(MIN_REQUESTS, REQUESTS_PER_STREAM * streams), report=report,
                       api_key=api_key)  # fmt: skip
        started = time.monotonic()
        levels = execute(argv, report, work / f"{name}.log")
        found["seconds"] = round(found["seconds"] + time.monotonic() - started, 1)
        found["commands"].append(argv)
        found["reports"].append(str(report))
        found["levels"] += levels
        print(json.dumps({"guidellm": f"{prompt_tokens}/{output_tokens}", **found["levels"][-1]}), flush=True)
    return found


def _stats(distribution: dict | None) -> dict:
    """p50/p95/p99 and mean of one of GuideLLM's distributions (its `successful` requests)."""
    if not distribution:
        return {}
    pct = distribution.get("percentiles") or {}
    return {"p50": _round(pct.get("p50")), "p95": _round(pct.get("p95")), "p99": _round(pct.get("p99")),
            "mean": _round(distribution.get("mean"))}  # fmt: skip


def _round(value) -> float | None:
    return None if value is None else round(float(value), 2)


def summary(report: dict) -> list[dict]:
    """Per concurrency: what the report's benchmarks measured over their successful requests."""
    levels = []
    for bench in report.get("benchmarks", []):
        metrics = bench["metrics"]
        strategy = bench.get("config", {}).get("strategy", {})
        totals = metrics.get("request_totals") or {}

        def successful(name: str, metrics: dict = metrics) -> dict:
            return (metrics.get(name) or {}).get("successful") or {}

        levels.append({
            "concurrency": strategy.get("streams"),
            "requests": totals.get("successful"), "errored": totals.get("errored"),
            "incomplete": totals.get("incomplete"),
            "requests_per_s": _round(successful("requests_per_second").get("mean")),
            "output_tokens_per_s": _round(successful("output_tokens_per_second").get("mean")),
            "time_to_first_token_ms": _stats(successful("time_to_first_token_ms")),
            "inter_token_latency_ms": _stats(successful("inter_token_latency_ms")),
            "time_per_output_token_ms": _stats(successful("time_per_output_token_ms")),
            "chunks": _stats(successful("request_streaming_iterations_count")),
            "request_latency_s": _stats(successful("request_latency")),
            "output_tokens": _stats(successful("output_token_count")),
        })  # fmt: skip
    return levels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--guidellm", type=Path, required=True, help="a virtualenv with guidellm")
    parser.add_argument("--target", required=True, help="the OpenAI-compatible front's base URL (no /v1)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokenizer", type=Path, required=True, help="the model's tokenizer directory")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--lengths", default="128/128", help="prompt/answer tokens, comma-separated")
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    found = {}
    for pair in args.lengths.split(","):
        prompt_tokens, output_tokens = (int(n) for n in pair.split("/"))
        found[pair] = run(args.guidellm, target=args.target, model=args.model, tokenizer=args.tokenizer,
                          prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                          concurrency=[int(c) for c in args.concurrency.split(",")], work=args.out,
                          api_key=args.api_key)  # fmt: skip
    (args.out / "guidellm.json").write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
