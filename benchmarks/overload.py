"""Overload through the serving front, measured with NVIDIA's AIPerf (docs/performance.md, "Overload").

Three API keys send streamed completions through HAProxy at once, each from its own AIPerf
process (one key per process: AIPerf sends one Authorization header): two tenants within their
share and one that floods. First the front's capacity is found with one key: the highest request
rate whose requests meet the objective (time to first token under fleet_slo_ttft_ms and
inter-token latency under fleet_slo_itl_ms, from group_vars/all/fleet.yml unless given) at least
--meet of the time. Then, at each --loads multiple L of that capacity C, the two tenants send C/6
requests a second each (half their third) and the flood key the rest, L x C - C/3 (four times a
tenant at 1x); at L = 0 the tenants send alone (their unloaded figures: each tenant's p95 time to
first token under load is given as a multiple of it). Per key and load: requests sent, answered
and refused (by status and code), goodput (requests a second that met the objective; AIPerf's own
figure beside it), time to first token and inter-token latency p50/p95/p99 of the answered. How
fast refusals come: AIPerf records no time for a failed request, so a probe sends --probe-share of
the flood key's requests itself (AIPerf the rest), in bursts of --probe-burst at even intervals,
each on a connection of its own, times its status line (p50/p95/p99 ms of the refusals) and reads
an accepted stream to its end, as AIPerf's clients do. Bursts, because HAProxy refuses at once
only while a round of requests already waits: requests sent one at a time at even intervals
found that so rarely that none of 105 was refused at 5x, while AIPerf's (which come in bursts
when its workers fall behind) were refused 185 times of 279.

    .bench-venv/bin/python -m benchmarks.overload --out runs/overload.json     # make overload-bench

AIPerf runs from its own virtualenv (make overload-bench makes .bench-venv): it pins a newer
stack than the project's tests. Each run is bounded: --seconds per level plus AIPerf's grace
period, and the rates are Poisson arrivals (AIPerf's default).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import http.client
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LAB_KEYS = {  # inventories/lab/group_vars/gpu_hosts/gateway.yml
    "tenant-a": "ftf-lab-tenant-a-not-a-secret-06",
    "tenant-b": "ftf-lab-tenant-b-not-a-secret-07",
    "flood": "ftf-lab-tenant-flood-not-secret-8",
}
GRACE_S = 30


def objectives() -> tuple[float, float]:
    """The fleet's objectives (ms) as group_vars/all/fleet.yml sets them."""
    fleet = yaml.safe_load((ROOT / "group_vars/all/fleet.yml").read_text())
    return float(fleet["fleet_slo_ttft_ms"]), float(fleet["fleet_slo_itl_ms"])


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50/p95/p99 by the nearest rank (None without values)."""
    ordered = sorted(values)
    if not ordered:
        return {"p50": None, "p95": None, "p99": None}
    pick = lambda q: ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]  # noqa: E731
    return {"p50": round(pick(0.50), 2), "p95": round(pick(0.95), 2), "p99": round(pick(0.99), 2)}


def aiperf_command(args: argparse.Namespace, key: str, rate: float, out: Path) -> list[str]:
    ttft, itl = args.slo_ttft_ms, args.slo_itl_ms
    return [
        args.aiperf, "profile",
        "--model", args.model, "--url", args.url, "--endpoint-type", "completions", "--streaming",
        "--api-key", key, "--tokenizer", str(args.tokenizer),
        "--request-rate", f"{rate:.3f}", "--benchmark-duration", str(args.seconds),
        "--benchmark-grace-period", str(GRACE_S), "--request-timeout-seconds", "60",
        "--prompt-input-tokens-mean", str(args.prompt_tokens), "--prompt-input-tokens-stddev", "0",
        "--prompt-output-tokens-mean", str(args.tokens), "--prompt-output-tokens-stddev", "0",
        "--extra-inputs", "ignore_eos:true", "--random-seed", "7",
        "--goodput", f"time_to_first_token:{ttft:g} inter_token_latency:{itl:g}",
        "--output-artifact-dir", str(out), "--ui-type", "none", "--workers-max", "2",
        "--no-server-metrics", "--no-gpu-telemetry", "--no-auto-plot",
    ]  # fmt: skip


def records(out: Path) -> list[dict]:
    """AIPerf's per-request records (profile_export.jsonl), wherever under out it wrote them."""
    found = sorted(out.rglob("profile_export.jsonl"))
    if not found:
        raise SystemExit(f"AIPerf wrote no profile_export.jsonl under {out}")
    return [json.loads(line) for line in found[0].read_text().splitlines() if line.strip()]


def summary(out: Path) -> dict:
    """AIPerf's own aggregate (profile_export_aiperf.json): the goodput and the throughput."""
    found = sorted(out.rglob("profile_export_aiperf.json"))
    return json.loads(found[0].read_text()) if found else {}


def _metric(record: dict, name: str) -> float | None:
    value = (record.get("metrics") or {}).get(name)
    if isinstance(value, dict):
        value = value.get("value")
    return value


def per_key(out: Path, seconds: float, slo_ttft_ms: float, slo_itl_ms: float) -> dict:
    """One key's figures from its AIPerf run: counts by outcome, the answered requests' latencies
    and goodput (requests a second under both objectives)."""
    rows = records(out)
    outcomes: collections.Counter[str] = collections.Counter()
    ttft, itl, good = [], [], 0
    for row in rows:
        error = row.get("error")
        if error:
            outcomes[f"{error.get('code')} {_error_code(error)}"] += 1
            continue
        outcomes["200"] += 1
        first, between = _metric(row, "time_to_first_token"), _metric(row, "inter_token_latency")
        if first is not None:
            ttft.append(first)
        if between is not None:
            itl.append(between)
        if first is not None and first <= slo_ttft_ms and (between is None or between <= slo_itl_ms):
            good += 1
    aggregate = summary(out)
    return {
        "sent": len(rows),
        "outcomes": dict(sorted(outcomes.items())),
        "goodput_rps": round(good / seconds, 3),
        "aiperf_goodput_rps": (aggregate.get("goodput") or {}).get("avg"),
        "answered_rps": round(outcomes["200"] / seconds, 3),
        "ttft_ms": percentiles(ttft),
        "itl_ms": percentiles(itl),
    }


def _error_code(error: dict) -> str:
    """The OpenAI error code in a refusal's body ("" where the body was not such JSON)."""
    message = error.get("message") or ""
    start = message.find("{")
    try:
        body = json.loads(message[start:]) if start >= 0 else {}
    except ValueError:
        return ""
    return str((body.get("error") or {}).get("code") or "")


def probe(args: argparse.Namespace, key: str, rate: float, seconds: float, burst: int = 1) -> dict:
    """`rate` streamed requests a second for `seconds`, `burst` at once at even intervals, each
    from a thread of its own so that a slow answer does not delay the next: the answers by status,
    and how fast each refusal's status line came (what AIPerf does not record). An accepted
    stream is read to its end."""
    target = urllib.parse.urlsplit(args.url)
    body = json.dumps({"model": args.model, "prompt": "Every role", "max_tokens": args.tokens, "stream": True,
                       "ignore_eos": True})  # fmt: skip
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    connection = http.client.HTTPSConnection if target.scheme == "https" else http.client.HTTPConnection

    def one() -> tuple[str, float]:
        began = time.monotonic()
        conn = connection(target.hostname, target.port, timeout=120)  # no port: the scheme's own
        try:
            conn.request("POST", f"{target.path.rstrip('/')}/v1/completions", body=body, headers=headers)
            answer = conn.getresponse()
            status, ms = str(answer.status), (time.monotonic() - began) * 1000
            answer.read()  # a stream cut short counts as its error below
        except OSError as err:
            return type(err).__name__, (time.monotonic() - began) * 1000
        finally:
            conn.close()
        return status, ms

    started, sent = time.monotonic(), []
    with concurrent.futures.ThreadPoolExecutor(max(2 * burst, min(64, math.ceil(rate * 4)))) as pool:
        while (due := started + len(sent) / rate) < started + seconds:
            time.sleep(max(0.0, due - time.monotonic()))
            sent += [pool.submit(one) for _ in range(burst)]
    times: dict[str, list[float]] = collections.defaultdict(list)
    for future in sent:
        status, ms = future.result()
        times[status].append(ms)
    refusals = [t for status, ts in times.items() if status in ("429", "503") for t in ts]
    return {"rate_rps": round(rate, 3), "answers": {k: len(v) for k, v in sorted(times.items())},
            "refusal_ms": percentiles(refusals), "answered_status_ms": percentiles(times.get("200", []))}  # fmt: skip


def run_level(args: argparse.Namespace, rates: dict[str, float], work: Path, name: str,
              probe_rate: float = 0.0) -> dict:  # fmt: skip
    """Every key of rates at once, each its own AIPerf (and the probe at probe_rate, with the
    flood key); their figures by key."""
    prober = None
    if probe_rate:
        pool = concurrent.futures.ThreadPoolExecutor(1)
        prober = pool.submit(probe, args, args.keys["flood"], probe_rate, args.seconds, args.probe_burst)
        pool.shutdown(wait=False)
    procs = {}
    for who, rate in rates.items():
        out = work / name / who
        out.mkdir(parents=True)
        log = (work / name / f"{who}.log").open("w")
        procs[who] = (subprocess.Popen(aiperf_command(args, args.keys[who], rate, out), stdout=log, stderr=log), out)
    deadline = time.monotonic() + args.seconds + GRACE_S + 120
    for who, (proc, _) in procs.items():
        try:
            proc.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            raise SystemExit(f"AIPerf for {who} at {name} ran past its bound; log: {work / name / who}.log") from None
        if proc.returncode:
            tail = (work / name / f"{who}.log").read_text()[-2000:]
            raise SystemExit(f"AIPerf for {who} at {name} failed ({proc.returncode}):\n{tail}")
    figures = {
        who: {"rate_rps": round(rates[who], 3), **per_key(out, args.seconds, args.slo_ttft_ms, args.slo_itl_ms)}
        for who, (_, out) in procs.items()
    }
    return {**figures, "probe": prober.result()} if prober else figures


def find_capacity(args: argparse.Namespace, work: Path) -> tuple[float, list[dict]]:
    """The highest of --rates (one key alone) whose requests meet the objective at least --meet
    of the time; the sweep stops at the first rate that does not."""
    sweep, capacity = [], 0.0
    for rate in args.rates:
        figures = run_level(args, {"tenant-a": rate}, work, f"capacity-{rate:g}")["tenant-a"]
        met = figures["goodput_rps"] * args.seconds / max(1, figures["sent"])
        sweep.append({"rate_rps": rate, "met": round(met, 3), **figures})
        print(json.dumps({"capacity_sweep": sweep[-1]}), flush=True)
        if met < args.meet:
            break
        capacity = rate
    if not capacity:
        raise SystemExit(f"not even {args.rates[0]} requests a second met the objective: lower --rates")
    return capacity, sweep


def run_loads(args: argparse.Namespace, capacity: float, work: Path) -> list[dict]:
    """Each of --loads in turn: the tenants at a sixth of the capacity each, the flood key (AIPerf
    and the probe) the rest of load x capacity; at load 0 the tenants alone."""
    levels = []
    for load in args.loads:
        tenant = capacity / 6
        rates, probe_rate = {"tenant-a": tenant, "tenant-b": tenant}, 0.0
        if load > 0:
            flood = max(tenant, load * capacity - 2 * tenant)
            probe_rate = flood * args.probe_share
            rates["flood"] = flood - probe_rate
        levels.append({"load": load, "keys": run_level(args, rates, work, f"load-{load:g}", probe_rate)})
        print(json.dumps(levels[-1]), flush=True)
    return levels


def _ms(p: dict) -> str:
    return " / ".join("-" if p[q] is None else f"{p[q]:.0f}" for q in ("p50", "p95", "p99"))


SWEEP_HEAD = "| rate/s | sent | answered | refused | goodput/s | met | TTFT p50 / p95 / p99 ms |"
LOAD_HEAD = ("| load | key | rate/s | sent | answered | refused (code: count) | goodput/s | TTFT p50 / p95 / p99 ms "
             "| TTFT p95 / unloaded | ITL p50 / p95 / p99 ms | probe: rate/s, answers "
             "| refusals' time p50 / p95 / p99 ms |")  # fmt: skip


def unloaded_p95(result: dict) -> dict[str, float]:
    """Each tenant's p95 time to first token at load 0 (the tenants alone), where it was run."""
    for level in result["loads"]:
        if level["load"] == 0:
            return {who: row["ttft_ms"]["p95"] for who, row in level["keys"].items() if row["ttft_ms"]["p95"]}
    return {}


def table(result: dict) -> str:
    """The result as docs/performance.md shows it: the capacity sweep, then per load and key."""
    slo = result["slo"]
    lines = [f"capacity: {result['capacity_rps']:g} requests/s (objective: time to first token "
             f"{slo['ttft_ms']:g} ms, inter-token {slo['itl_ms']:g} ms)", "", SWEEP_HEAD, "|---" * 7 + "|"]  # fmt: skip
    for row in result.get("capacity_sweep", []):
        answered = row["outcomes"].get("200", 0)
        lines.append(f"| {row['rate_rps']:g} | {row['sent']} | {answered} | {row['sent'] - answered} | "
                     f"{row['goodput_rps']:.2f} | {row['met']:.0%} | {_ms(row['ttft_ms'])} |")  # fmt: skip
    lines += ["", LOAD_HEAD, "|---" * 12 + "|"]
    unloaded = unloaded_p95(result)
    for level in result["loads"]:
        keys = level["keys"]
        probe = keys.get("probe", {})
        for who in ("tenant-a", "tenant-b", "flood"):
            if who not in keys:
                continue
            row = keys[who]
            refused = ", ".join(f"{code}: {n}" for code, n in row["outcomes"].items() if code != "200") or "0"
            p95 = row["ttft_ms"]["p95"]
            ratio = f"{p95 / unloaded[who]:.1f}x" if level["load"] and who in unloaded and p95 is not None else ""
            probed = timed = ""
            if who == "flood" and probe:
                answers = ", ".join(f"{code}: {n}" for code, n in probe["answers"].items())
                probed, timed = f"{probe.get('rate_rps', 1):g}, {answers}", _ms(probe["refusal_ms"])
            lines.append(f"| {level['load']:g}x | {who} | {row['rate_rps']:g} | {row['sent']} | "
                         f"{row['outcomes'].get('200', 0)} | {refused} | {row['goodput_rps']:.2f} | "
                         f"{_ms(row['ttft_ms'])} | {ratio} | {_ms(row['itl_ms'])} | {probed} | {timed} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ttft, itl = objectives()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:18500")
    parser.add_argument("--model", default="tiny-gpt2")
    parser.add_argument("--tokenizer", type=Path, default=ROOT / "lab/models/tiny-gpt2")
    parser.add_argument("--aiperf", default=shutil.which("aiperf") or str(Path(sys.executable).parent / "aiperf"))
    parser.add_argument("--slo-ttft-ms", type=float, default=ttft)
    parser.add_argument("--slo-itl-ms", type=float, default=itl)
    parser.add_argument("--seconds", type=int, default=30, help="each level's sending time")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per answer (ignore_eos)")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--rates", type=lambda s: [float(r) for r in s.split(",")], default=[1, 2, 3, 4, 6, 8])
    parser.add_argument("--capacity", type=float, help="skip the sweep: this many requests a second")
    parser.add_argument("--meet", type=float, default=0.9, help="share of requests that must meet the objective")
    parser.add_argument("--loads", type=lambda s: [float(x) for x in s.split(",")], default=[0, 1, 2, 5],
                        help="multiples of the capacity; 0: the tenants alone (their unloaded figures)")  # fmt: skip
    parser.add_argument("--probe-share", type=float, default=0.25,
                        help="the share of the flood key's requests that the probe sends and times")  # fmt: skip
    parser.add_argument("--probe-burst", type=int, default=3, help="the probe's requests sent at once")
    parser.add_argument("--keys", type=json.loads, default=LAB_KEYS, help="JSON: tenant-a, tenant-b, flood -> key")
    parser.add_argument("--out", type=Path, help="write the whole result here as JSON")
    parser.add_argument("--keep", action="store_true", help="keep AIPerf's artifacts (printed)")
    parser.add_argument("--table", type=Path, help="print an earlier --out as docs/performance.md's tables, and stop")
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return 0
    if not Path(args.aiperf).exists():
        raise SystemExit(f"no AIPerf at {args.aiperf}: make overload-bench installs it into .bench-venv")
    work = Path(tempfile.mkdtemp(prefix="ftfleet-overload-"))
    try:
        slo = {"ttft_ms": args.slo_ttft_ms, "itl_ms": args.slo_itl_ms}
        result: dict = {"url": args.url, "model": args.model, "seconds": args.seconds, "tokens": args.tokens,
                        "prompt_tokens": args.prompt_tokens, "slo": slo}  # fmt: skip
        if args.capacity:
            capacity = args.capacity
        else:
            capacity, result["capacity_sweep"] = find_capacity(args, work)
        result["capacity_rps"] = capacity
        result["loads"] = run_loads(args, capacity, work)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result))
    finally:
        if args.keep:
            print(f"AIPerf's artifacts: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
