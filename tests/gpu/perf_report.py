"""The perf step's results as docs/performance.md shows them (run on the controller, with the
project's virtualenv): merges the perf-<shape>.json files that tests/gpu/perf.py wrote in one or
more calls (a shape's lengths and concurrencies measured apart are joined), writes the merged JSON,
and prints a Markdown table per shape and length, with each goal of docs/performance.md judged;
--plot writes output tokens/s and inter-token latency against concurrency per layer. The
perf-sweep-<shape>.json files of perf.py --sweep are merged the same way (a variant's levels from
several calls joined) into one table per shape and length: each variant against the perf set's.

    .venv/bin/python tests/gpu/perf_report.py RUN/perf-*.json... --out docs/gpu/h200-perf-tp1.json
        [--plot docs/gpu/h200-perf.png] [--card "NVIDIA H200 ..."]
    .venv/bin/python tests/gpu/perf_report.py --sweep RUN/perf-sweep-*.json... --out docs/gpu/h200-sweep.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FT, ENSEMBLE, GATEWAY = "Triton (fastertransformer, gRPC)", "Triton (ensemble, gRPC)", "gateway -> Triton"


def merge(files: list[Path]) -> dict:
    """One result per shape: every call's levels, sorted by concurrency (a later call's level
    replaces an earlier one's at the same concurrency)."""
    shapes: dict[str, dict] = {}
    for path in files:
        found = json.loads(path.read_text())
        if "error" in found:
            raise SystemExit(f"{path}: the run failed: {found['error']}")
        into = shapes.setdefault(found["shape"], {**found, "transformers": {}, "stack": {}})
        for lengths, levels in found["transformers"].items():
            join(into["transformers"].setdefault(lengths, []), levels)
        for lengths, measured in found["stack"].items():
            mine = into["stack"].setdefault(lengths, {**measured, "layers": {}})
            for layer, levels in measured["layers"].items():
                join(mine["layers"].setdefault(layer, []), levels)
        if found.get("checkpoint_seconds") is not None:
            into["checkpoint_seconds"] = found["checkpoint_seconds"]
    return shapes


def join(into: list[dict], levels: list[dict]) -> None:
    by = {level["concurrency"]: level for level in into}
    by.update({level["concurrency"]: level for level in levels})
    into[:] = [by[c] for c in sorted(by)]


def at(levels: list[dict], concurrency: int) -> dict | None:
    return next((level for level in levels if level["concurrency"] == concurrency), None)


def goals(shape: dict) -> list[tuple[str, str, bool | None]]:
    """docs/performance.md's goals, judged where this run measured what each needs."""
    found = []
    for lengths, measured in shape["stack"].items():
        layers = measured["layers"]
        ft1, gw1 = at(layers.get(FT, []), 1), at(layers.get(GATEWAY, []), 1)
        ft16, gw16 = at(layers.get(FT, []), 16), at(layers.get(GATEWAY, []), 16)
        if ft16 and gw16:
            ratio = gw16["requests_per_s"] / ft16["requests_per_s"]
            found.append((f"{lengths}: gateway >= 0.98x Triton's throughput at 16", f"{ratio:.2f}x", ratio >= 0.98))
        if ft1 and gw1:
            added = gw1["p50_ms"] - ft1["p50_ms"]
            found.append((f"{lengths}: gateway <= +1 ms p50 at 1", f"{added:+.1f} ms", added <= 1.0))
            ratio = ft1["itl_p50_ms"] / shape["floor_itl_ms"]
            found.append((f"{lengths}: FT's inter-token latency at 1 within 1.5x of the floor", f"{ratio:.2f}x",
                          ratio <= 1.5))  # fmt: skip
        for level in layers.get(FT, []):
            before = at(shape["transformers"].get(lengths, []), level["concurrency"])
            if before:
                factor = level["output_tokens_per_s"] / before["output_tokens_per_s"]
                found.append((f"{lengths}: FT / transformers, output tokens/s at {level['concurrency']}",
                              f"{factor:.1f}x", None))  # fmt: skip
    return found


def merge_sweeps(files: list[Path]) -> dict:
    """One result per shape: each variant's levels per length, joined across calls (a later
    call's level replaces an earlier one's at the same concurrency)."""
    shapes: dict[str, dict] = {}
    for path in files:
        found = json.loads(path.read_text())
        if "error" in found:
            raise SystemExit(f"{path}: the run failed: {found['error']}")
        into = shapes.setdefault(found["shape"], {**found, "sweep": {}})
        for name, variant in found["sweep"].items():
            mine = into["sweep"].setdefault(name, {**variant, "lengths": {}})
            for key in ("gpt_gemm", "tritonserver_ready_s"):
                if key in variant:
                    mine[key] = variant[key]
            for lengths, measured in variant["lengths"].items():
                join(mine["lengths"].setdefault(lengths, {**measured, "levels": []})["levels"], measured["levels"])
    return shapes


def sweep_table(name: str, shape: dict) -> str:
    """Per length: every variant at every concurrency, its throughput against the perf set's."""
    rows = []
    lengths_seen = sorted({lengths for v in shape["sweep"].values() for lengths in v["lengths"]})
    base = shape["sweep"].get("perf-set", {"lengths": {}})
    for lengths in lengths_seen:
        rows += [f"### {name}, {lengths} tokens: serving settings", "",
                 "| variant | change | concurrency | requests/s | against the perf set | p50 ms | p95 ms "
                 "| first token p50 / p95 ms | between tokens p50 ms |",
                 "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for variant, found in shape["sweep"].items():
            change = ", ".join(f"{k} {v}" for k, v in found["change"].items()) or "-"
            if "gpt_gemm" in found:
                change += f" (gpt_gemm {' '.join(found['gpt_gemm']['argv'])})"
            for r in found["lengths"].get(lengths, {}).get("levels", []):
                ref = at(base["lengths"].get(lengths, {}).get("levels", []), r["concurrency"])
                ratio = f"{r['requests_per_s'] / ref['requests_per_s']:.2f}x" if ref and ref["requests_per_s"] else "-"
                rows.append(f"| {variant} | {change} | {r['concurrency']} | {r['requests_per_s']} | {ratio} | "
                            f"{r['p50_ms']} | {r['p95_ms']} | {r['ttft_p50_ms']} / {r['ttft_p95_ms']} | "
                            f"{r['itl_p50_ms']} |")  # fmt: skip
        rows.append("")
    return "\n".join(rows)


def table(name: str, shape: dict) -> str:
    rows = [f"### {name} ({shape['weight_bytes'] / 1e9:.2f} GB of fp16 weights; floor "
            f"{shape['floor_itl_ms']} ms at {shape['copy_bandwidth_gb_s']} GB/s)", ""]  # fmt: skip
    for lengths, measured in shape["stack"].items():
        rows += [f"Prompt {measured['prompt_tokens']} tokens, answer {measured['output_tokens']} tokens:", "",
                 "| layer | concurrency | requests/s | output tokens/s | p50 ms | p99 ms "
                 "| first token p50 / p95 / p99 ms | between chunks p50 / p95 / p99 ms |",
                 "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for layer, levels in measured["layers"].items():
            for r in levels:
                first = f"{r['ttft_p50_ms']} / {r['ttft_p95_ms']} / {r['ttft_p99_ms']}"
                gaps = f"{r['itl_p50_ms']} / {r['itl_p95_ms']} / {r['itl_p99_ms']}"
                rows.append(f"| {layer} | {r['concurrency']} | {r['requests_per_s']} | {r['output_tokens_per_s']} | "
                            f"{r['p50_ms']} | {r['p99_ms']} | {first} | {gaps} |")  # fmt: skip
        for r in shape["transformers"].get(lengths, []):
            rows.append(f"| transformers generate(), one batch | {r['concurrency']} | {r['requests_per_s']} | "
                        f"{r['output_tokens_per_s']} | {r['latency_ms']} | - | - "
                        f"| {r['itl_ms']} (per step) |")  # fmt: skip
        rows.append("")
    rows += ["| goal | measured | met |", "|---|---|---|"]
    rows += [
        f"| {what} | {value} | {'-' if met is None else 'yes' if met else 'NO'} |" for what, value, met in goals(shape)
    ]
    return "\n".join(rows) + "\n"


def plot(shapes: dict, out: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = [(name, lengths) for name, shape in shapes.items() for lengths in shape["stack"]]
    fig, axes = plt.subplots(2, len(panels), figsize=(4.5 * len(panels), 7), squeeze=False)
    for column, (name, lengths) in enumerate(panels):
        shape = shapes[name]
        top, bottom = axes[0][column], axes[1][column]
        for layer, levels in shape["stack"][lengths]["layers"].items():
            xs = [r["concurrency"] for r in levels]
            top.plot(xs, [r["output_tokens_per_s"] for r in levels], marker="o", label=layer)
            bottom.plot(xs, [r["itl_p50_ms"] for r in levels], marker="o", label=layer)
        before = shape["transformers"].get(lengths, [])
        xs = [r["concurrency"] for r in before]
        top.plot(xs, [r["output_tokens_per_s"] for r in before], marker="s", ls="--", label="transformers")
        bottom.plot(xs, [r["itl_ms"] for r in before], marker="s", ls="--", label="transformers")
        bottom.axhline(shape["floor_itl_ms"], color="grey", ls=":", label="floor (weights / bandwidth)")
        top.set_title(f"{name} {lengths}: output tokens/s")
        bottom.set_title(f"{name} {lengths}: p50 ms between tokens")
        for axis in (top, bottom):
            axis.set_xscale("log", base=2)
            axis.set_xlabel("concurrent clients")
            axis.grid(True, alpha=0.3)
        bottom.set_yscale("log")
    axes[1][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", type=Path, nargs="+", help="perf-<shape>.json (or perf-sweep-) from tests/gpu/perf.py")
    parser.add_argument("--sweep", action="store_true", help="the files are perf.py --sweep's")
    parser.add_argument("--out", type=Path, required=True, help="the merged JSON")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--card", default="", help="the GPU, driver and versions, recorded in the JSON")
    parser.add_argument("--command", default="", help="how the files were made, recorded in the JSON")
    args = parser.parse_args()
    if args.sweep:
        shapes = merge_sweeps(args.files)
        args.out.write_text(json.dumps({"card": args.card, "command": args.command, "shapes": shapes}, indent=1) + "\n")
        for name, shape in shapes.items():
            print(sweep_table(name, shape))
        return 0
    shapes = merge(args.files)
    args.out.write_text(json.dumps({"card": args.card, "command": args.command, "shapes": shapes}, indent=1) + "\n")
    for name, shape in shapes.items():
        print(table(name, shape))
    if args.plot:
        plot(shapes, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
