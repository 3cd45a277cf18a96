"""How long a rollout takes: the serve stage's batches (Ansible's `serial` forms: a count, a
percentage, or a list of them whose last one repeats) and, from the last runs' per-host restart
times, the time each batch waits on its slowest host."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

SERIAL = "fleet_serve_serial"


def batch_sizes(serial: Any, hosts: int) -> list[int]:
    """The sizes of the batches Ansible makes of `hosts` hosts for this `serial` (its
    _get_serialized_batches: a percentage is of all the play's hosts, at least 1; the last item
    repeats; 0 or less is every host left)."""
    items = list(serial) if isinstance(serial, (list, tuple)) else [serial]
    if not items:
        return [hosts] if hosts else []
    sizes, left, turn = [], hosts, 0
    while left > 0:
        item = str(items[min(turn, len(items) - 1)]).strip()
        size = (int(int(item[:-1]) / 100.0 * hosts) or 1) if item.endswith("%") else int(item)
        size = left if size <= 0 else min(size, left)
        sizes.append(size)
        left -= size
        turn += 1
    return sizes


def serial_of(extra_vars: Iterable[str], base: Path) -> Any:
    """fleet_serve_serial as ansible-playbook's -e words give it (key=value, JSON or YAML, @file;
    the last one wins), else the serve stage's default, 1."""
    serial: Any = 1
    for words in extra_vars:
        if words.startswith("@"):
            found = yaml.safe_load((base / words[1:]).read_text()) or {}
        elif words.lstrip().startswith("{"):
            found = yaml.safe_load(words)
        else:
            found = dict(re.findall(r"(\w+)=(\S+)", words))
        if isinstance(found, Mapping) and SERIAL in found:
            serial = found[SERIAL]
    return serial


def restart_seconds(runs_dir: Path) -> dict[str, float]:
    """host -> seconds its last restart in an `ftfleet apply` took (report.json's `rollout`,
    newest run first)."""
    seconds: dict[str, float] = {}
    for report in sorted(runs_dir.glob("*-apply/report.json"), reverse=True):
        try:
            rollout = json.loads(report.read_text()).get("rollout") or {}
        except (OSError, ValueError):
            continue
        for host, took in rollout.items():
            seconds.setdefault(host, float(took))
    return seconds


def plan(hosts: list[str], restarting: set[str], serial: Any, history: Mapping[str, float]) -> dict[str, Any]:
    """The rollout of `restarting` among the serve stage's `hosts` (in play order): its batches
    and, where the history knows restart times, its length (each batch as long as its slowest
    restarting host; a host never timed counts as the median of those that were)."""
    sizes = batch_sizes(serial, len(hosts))
    batches, at = [], 0
    for size in sizes:
        batches.append(hosts[at : at + size])
        at += size
    typical = statistics.median(history.values()) if history else None
    seconds: float | None = 0.0
    for batch in batches:
        times = [history.get(host, typical) for host in batch if host in restarting]
        if any(t is None for t in times):
            seconds = None
            break
        seconds += max(times, default=0.0)  # type: ignore[operator]
    busy = [batch for batch in batches if restarting & set(batch)]
    return {"serial": serial, "batches": len(batches), "sizes": sizes, "restarting": len(restarting),
            "batches_restarting": len(busy), "seconds": None if seconds is None else round(seconds, 1)}  # fmt: skip


def describe(rollout: Mapping[str, Any]) -> str:
    """One line for ftfleet plan."""
    if not rollout["restarting"]:
        return "serve: no host restarts"
    sizes = rollout["sizes"]
    shown = ", ".join(map(str, sizes[:8])) + (", ..." if len(sizes) > 8 else "")
    line = (f"serve: {rollout['restarting']} host(s) restart in {rollout['batches_restarting']} of "
            f"{rollout['batches']} batch(es) of {shown} host(s) "
            f"(fleet_serve_serial={json.dumps(rollout['serial'])})")  # fmt: skip
    if rollout["seconds"] is None:
        return line + "; how long: no earlier `ftfleet apply` restarted a host to time it"
    return line + f"; about {rollout['seconds']:.0f} s, from the last applies' restart times"
