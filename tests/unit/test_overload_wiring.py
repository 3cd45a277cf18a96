"""The overload bounds' values that live in two places stay equal: the fleet's computed slots read
triton_model_repo's batching with that role's defaults, and HAProxy names the gateway's headers
(busy refusals, tokens spent)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ftgateway import errors

ROOT = Path(__file__).resolve().parents[2]


def _yaml(path: str) -> dict:
    return yaml.safe_load((ROOT / path).read_text())


def test_the_fleets_slots_fall_back_to_triton_model_repos_own_defaults():
    """The fleet's slots read the batch size where triton_model_repo reads it (role fleet_shared's
    one value) and the role's own dynamic batching default."""
    slots = _yaml("group_vars/all/fleet.yml")["fleet_generation_slots"]
    role = _yaml("roles/triton_model_repo/defaults/main.yml")
    batch = re.search(r"triton_model_repo_max_batch_size \| default\((\w+)\)", slots)
    dynamic = re.search(r"triton_model_repo_dynamic_batching \| default\((\w+)\)", slots)
    assert batch, slots
    assert dynamic, slots
    assert role["triton_model_repo_max_batch_size"] == "{{ " + batch.group(1) + " }}"
    assert isinstance(_yaml("roles/fleet_shared/defaults/main.yml")[batch.group(1)], int)
    assert yaml.safe_load(dynamic.group(1)) is role["triton_model_repo_dynamic_batching"]


def test_haproxy_names_the_gateways_headers():
    lb = _yaml("roles/load_balancer/vars/main.yml")
    assert lb["__load_balancer_refused_header"] == errors.REFUSED_HEADER
    assert lb["__load_balancer_busy_status_header"] == errors.BUSY_STATUS_HEADER
    assert lb["__load_balancer_tokens_header"] == errors.TOKENS_HEADER
