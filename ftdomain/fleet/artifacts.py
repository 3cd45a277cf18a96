"""Who makes a shared artifact (an image, a set of shards, a tuned gemm_config.in) and who takes
it from the registry: one election for the whole play, used by container_image, ft_convert and
ft_gemm_tune in a run_once task, which reads each host's variables once (linear in the hosts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ftdomain.values import truthy


def fleet_artifact_plans(
    hosts: list[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    key: str,
    have: str,
    in_registry: str = "",
    registry: bool = False,
    make: str = "make",
    place: str = "",
) -> dict[str, dict[str, str]]:
    registry = truthy(registry)
    peers: dict[Any, list[tuple[str, bool, bool]]] = {}  # artifact -> [(host, has it, registry has it)]
    plans = {}
    firsts: dict[tuple[str, str], str] = {}  # (artifact, machine) -> the first host there
    for host in dict.fromkeys(hosts):
        facts = hostvars[host]  # each host's variables once: a lookup templates that host's variables
        if key not in facts:
            continue
        artifact = str(facts[key])
        first = firsts.setdefault((artifact, str(facts.get(place) or host) if place else host), host)
        if first != host:  # another model's host on this machine makes or takes it
            plans[host] = {"plan": "mate", "source": first}
            continue
        found = registry and in_registry and truthy(facts.get(in_registry, False))
        peers.setdefault(artifact, []).append((host, truthy(facts.get(have, False)), found))
    for group in peers.values():
        holders = [host for host, held, _ in group if held]
        pusher = holders[0] if holders else ""
        maker = next((host for host, held, _ in group if not held), "")
        for host, held, found in group:
            if held:
                plan = "push" if registry and not found and pusher == host else "have"
            elif not registry:
                plan = make
            elif found:
                plan = "pull"
            elif pusher or maker != host:
                plan = "wait"
            else:
                plan = make
            plans[host] = {"plan": plan, "source": pusher or maker}
    return plans
