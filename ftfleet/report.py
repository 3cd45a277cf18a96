"""ftfleet report: the fleet's last hour from Prometheus, as a picture and the alerts that fire.

Reads the recording rules of the monitoring stage (roles/prometheus/files/ftfleet-recording.yml)
through Prometheus's HTTP API (query_range, alerts) and draws, per model: requests/s, goodput
(the answers a second that met the fleet's objectives), the refusals for want of capacity, p95
latency, the error ratio, GPU utilization and the generations continued on another host after
their tritonserver failed, one panel each, a line per model (docs/operations.md
shows one and how to read it).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

# Panel title, PromQL (a series per model), unit, scale, the least top of its axis.
PANELS = [
    ("requests/s", "model:ftgateway_requests:rate1m", "req/s", 1.0, 1.0),
    # Goodput: the answers a second that met the fleet's objectives (fleet_slo_ttft_ms, fleet_slo_itl_ms),
    # and the requests refused for want of capacity (the gateways' and HAProxy's own).
    ("goodput/s", "model:ftgateway_good:rate1m", "req/s", 1.0, 1.0),
    ("refused/s", "sum by (model) (model_reason:ftfleet_refused:rate1m)", "req/s", 1.0, 1.0),
    ("p95 latency", "model:ftgateway_request_seconds:p95_1m", "s", 1.0, 0.1),
    ("error ratio (5xx)", "model:ftgateway_request_errors:ratio_rate1m", "%", 100.0, 1.0),
    ("GPU utilization", "avg by (model) (instance:dcgm_gpu_utilization:avg)", "%", 100.0, 100.0),
    # A tritonserver that failed mid-answer: its generations went on from another host.
    ("continued generations (5 min)", 'sum by (model) (model:ftgateway_continuations:increase5m{outcome="continued"})',
     "", 1.0, 1.0),
]  # fmt: skip


class ReportError(Exception):
    """Prometheus could not be asked (the message says which URL and why)."""


def prometheus_url(inventory: str | None) -> str:
    """The first monitoring host's Prometheus, from the inventory: its monitoring_targets.prometheus,
    else <ansible_host or name>:<prometheus_port or 9090>."""
    # Beside this Python (the virtualenv's), as ansible-runner finds ansible-playbook.
    beside = Path(sys.executable).parent / "ansible-inventory"
    program = str(beside) if beside.exists() else "ansible-inventory"
    words = [program, "--list", *(["-i", inventory] if inventory else [])]
    done = subprocess.run(words, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ReportError(f"ansible-inventory failed: {done.stderr.strip()[-500:]}")
    listed = json.loads(done.stdout)
    hosts = (listed.get("monitoring_hosts") or {}).get("hosts") or []
    if not hosts:
        raise ReportError("the inventory has no monitoring_hosts (the monitoring stage); pass --prometheus URL")
    v = listed.get("_meta", {}).get("hostvars", {}).get(hosts[0], {})
    address = (v.get("monitoring_targets") or {}).get("prometheus")
    if not address:
        address = f"{v.get('ansible_host') or hosts[0]}:{v.get('prometheus_port') or 9090}"
    return f"http://{address}"


def ask(url: str, path: str, **params: Any) -> Any:
    """GET <url>/api/v1/<path> and its data, or ReportError."""
    full = f"{url.rstrip('/')}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    try:
        with urllib.request.urlopen(full, timeout=30) as answer:
            body = json.load(answer)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ReportError(f"Prometheus at {url} did not answer {path}: {err}") from err
    if body.get("status") != "success":
        raise ReportError(f"Prometheus at {url}: {path}: {body.get('error')}")
    return body["data"]


def series(url: str, expr: str, start: float, end: float, step: float) -> dict[str, list[tuple[float, float]]]:
    """model -> [(time, value)] of a range query (NaN kept as gaps)."""
    data = ask(url, "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step:g}")
    out: dict[str, list[tuple[float, float]]] = {}
    for row in data.get("result", []):
        model = row["metric"].get("model", "(no model)")
        out[model] = [(float(t), float(v)) for t, v in row["values"]]
    return out


def firing(url: str) -> list[dict[str, Any]]:
    """The alerts that fire now, most severe first."""
    alerts = [a for a in ask(url, "alerts").get("alerts", []) if a.get("state") == "firing"]
    rank = {"critical": 0, "warning": 1}
    return sorted(alerts, key=lambda a: (rank.get(a["labels"].get("severity", ""), 2), a["labels"]["alertname"]))


def collect(url: str, minutes: float, step: float, now: float | None = None) -> dict[str, Any]:
    end = time.time() if now is None else now
    start = end - minutes * 60
    panels = [{"title": title, "expr": expr, "unit": unit, "scale": scale, "top": top,
               "series": series(url, expr, start, end, step)} for title, expr, unit, scale, top in PANELS]  # fmt: skip
    return {"prometheus": url, "start": start, "end": end, "step": step, "panels": panels, "alerts": firing(url)}


def last(points: list[tuple[float, float]]) -> float | None:
    values = [v for _, v in points if not math.isnan(v)]
    return values[-1] if values else None


def draw(report: dict[str, Any], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - only to draw

    matplotlib.use("Agg")
    from datetime import UTC, datetime  # noqa: PLC0415

    import matplotlib.dates as mdates  # noqa: PLC0415
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(len(report["panels"]), 1, figsize=(10, 2.4 * len(report["panels"])), sharex=True)
    models = sorted({m for p in report["panels"] for m in p["series"]})
    colours = {m: f"C{i}" for i, m in enumerate(models)}
    for ax, panel in zip(axes, report["panels"], strict=True):
        for model, points in sorted(panel["series"].items()):
            xs = [datetime.fromtimestamp(t, UTC) for t, _ in points]
            ys = [v * panel["scale"] for _, v in points]
            ax.plot(xs, ys, label=model, color=colours[model], linewidth=1.4)
        ax.set_ylabel(panel["unit"])
        ax.set_title(panel["title"], loc="left", fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_ylim(0, max(ax.get_ylim()[1] * 1.1, panel["top"]))
        if not panel["series"]:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="grey")
    axes[0].legend(loc="upper left", fontsize=8)
    axes[-1].set_xlim(datetime.fromtimestamp(report["start"], UTC), datetime.fromtimestamp(report["end"], UTC))
    axes[-1].xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=UTC))
    axes[-1].set_xlabel("UTC")
    names = ", ".join(a["labels"]["alertname"] for a in report["alerts"]) or "none"
    minutes = round((report["end"] - report["start"]) / 60)
    fig.suptitle(f"ftfleet: the last {minutes} minutes from {report['prometheus']}\nfiring: {names}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
