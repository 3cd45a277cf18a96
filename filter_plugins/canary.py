"""Ansible's filters of ftdomain.fleet.canary: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: canary_picks
short_description: Which of the play's hosts are canaries, which wait for their verdict, which roll as before
description:
  - Called once per play (run_once); reads each host's variables once.
  - A host I(changes) when its variable canary_changes is true (filter canary_change: this run
    changes the revision, tp or weight dtype of the shards it serves, its model repository, its
    GEMM tuning, its gateway's settings that change answers or its serving image; or it is a
    canary whose change was never judged) and it serves through the gateway (fleet_gateway).
    Per model (fleet_model.name), in play order, the first fleet_canary_hosts hosts that change
    are C(canary), the other hosts that change C(wait); every other host is C(none). With
    I(enabled) false every host is C(none).
options:
  _input:
    description: The play's host names, in play order (ansible_play_hosts).
    type: list
    required: true
  hostvars:
    description: Ansible's hostvars.
    type: dict
    required: true
  enabled:
    description: Whether this run canaries at all (it runs the models and serve stages, not in check mode).
    type: bool
    required: true
"""

from typing import Any

from ftdomain.fleet.canary import (
    canary_change,
    canary_golden_failures,
    canary_held,
    canary_picks,
    canary_queries,
    canary_verdict,
    haproxy_sessions,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "canary_change": canary_change,
            "canary_picks": canary_picks,
            "canary_held": canary_held,
            "canary_queries": canary_queries,
            "canary_golden_failures": canary_golden_failures,
            "canary_verdict": canary_verdict,
            "haproxy_sessions": haproxy_sessions,
        }
