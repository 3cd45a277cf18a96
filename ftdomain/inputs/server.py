"""tritonserver, the model repository and the image's build: ports, names, batching, int8,
decoupled models and the Triton releases the build recipe refuses."""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Any

from ftdomain.fleet.model import SAFE_NAME
from ftdomain.ft.families import FAMILIES
from ftdomain.inputs.common import PROJECT, int_problems


def server_problems(v: Mapping[str, Any]) -> list[str]:
    ports = {n: v.get(f"triton_server_{n}_port") for n in ("http", "grpc", "metrics")}
    problems = int_problems(v, 1, tuple(f"triton_server_{n}_port" for n in ports), 65535)
    numbers = [p for p in ports.values() if isinstance(p, int)]
    if len(set(numbers)) != len(numbers):
        shown = ", ".join(f"triton_server_{n}_port={p}" for n, p in ports.items())
        problems.append(f"{shown}: two of them are the same port; fix: three distinct ports in host_vars")
    unit = v.get("triton_server_model_name")
    if isinstance(unit, str) and "{{" not in unit and not SAFE_NAME.fullmatch(unit):
        problems.append(
            f"triton_server_model_name={unit!r}: must be letters, digits and ._- (it names the unit and the "
            "container); fix: remove it (it follows fleet_model.name)"
        )
    address = v.get("triton_server_bind_address", "")
    if address:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            problems.append(f"triton_server_bind_address={address!r}: not an IP address; fix: e.g. 127.0.0.1 or ''")
    shm = v.get("triton_server_shm_size")
    if isinstance(shm, str) and not re.fullmatch(r"[1-9]\d*[bkmgBKMG]?", shm):
        problems.append(f"triton_server_shm_size={shm!r}: not a size docker takes; fix: e.g. 1g, 4g, 512m")
    for limit in v.get("triton_server_ulimits") or []:
        if not re.fullmatch(r"[a-z]+=-?\d+(:-?\d+)?", str(limit)):
            problems.append(f"triton_server_ulimits: {limit!r} is not NAME=SOFT[:HARD]; fix: e.g. memlock=-1")
    problems += int_problems(v, 0, ("triton_server_restart_sec",))
    problems += int_problems(v, 1, ("triton_server_restart_max_sec", "triton_server_start_limit_burst",
                                     "triton_server_start_limit_interval_sec", "triton_server_ready_timeout",
                                     "triton_server_smoke_output_len", "triton_server_smoke_timeout",
                                     "triton_server_log_lines"))  # fmt: skip
    return problems


BUILD_RECIPE = "roles/triton_image/files/ftb/recipe.json"


@functools.lru_cache(maxsize=1)
def _recipe_releases() -> dict[str, Any]:
    return json.loads((PROJECT / BUILD_RECIPE).read_text())["releases"]


def build_recipe_problems(v: Mapping[str, Any]) -> list[str]:
    """A Triton release whose Triton+FT image cannot be built: refused with the releases that can.
    Not checked where the image comes from an archive, or where the host serves no model."""
    version = v.get("fleet_triton_container_version")
    if v.get("triton_image_archive") or not v.get("fleet_model") or not isinstance(version, str):
        return []
    release = _recipe_releases().get(version.strip().removesuffix("-py3"))
    if release is None or "refused" not in release:  # unknown releases: the fleet checks name them
        return []
    buildable = ", ".join(name for name, r in _recipe_releases().items() if "refused" not in r)
    return [
        f"fleet_triton_container_version={version}: no Triton+FT image can be built for it: upstream's "
        "docker/Dockerfile pins torch 2.0.1, which has no wheel for its Python "
        f"{release['python']}, and the project's build recipe ({BUILD_RECIPE}) refuses it: {release['refused']}; "
        f"fix: one of {buildable}, or triton_image_archive with an image built elsewhere"
    ]


def triton_model_repo_problems(v: Mapping[str, Any], model: Mapping[str, Any]) -> list[str]:
    """Settings of the model repository that Triton or the FT backend cannot serve (used by the
    role triton_model_repo too)."""
    problems = int_problems(
        v,
        0,
        (
            "triton_model_repo_max_batch_size",
            "triton_model_repo_max_queue_delay_us",
            "triton_model_repo_max_queue_size",
            "triton_model_repo_queue_timeout_ms",
        ),
    )
    dynamic, sequence = v.get("triton_model_repo_dynamic_batching"), v.get("triton_model_repo_sequence_batching")
    batch, int8 = v.get("triton_model_repo_max_batch_size"), v.get("triton_model_repo_int8_mode", 0)
    if dynamic and sequence:
        problems.append(
            "triton_model_repo_dynamic_batching and triton_model_repo_sequence_batching are both true: "
            "Triton takes one or the other; fix: set one of them to false"
        )
    if batch == 0 and v.get("fleet_require_gpus") is False:
        problems.append(
            "triton_model_repo_max_batch_size=0 asks for the largest batch the GPU memory plan fits, and "
            "fleet_require_gpus is false: there is no GPU to plan; fix: set a max_batch_size"
        )
    if sequence and batch != 1:
        problems.append(
            f"triton_model_repo_sequence_batching needs triton_model_repo_max_batch_size 1, not {batch}; "
            "fix: set triton_model_repo_max_batch_size: 1"
        )
    family = FAMILIES.get(model.get("family", ""))
    if int8 not in (0, 1, 2):
        problems.append(f"triton_model_repo_int8_mode={int8}: valid 0, 1 (weight-only), 2; fix: 0 turns it off")
    elif int8 and family and not family.int8:
        problems.append(
            f"triton_model_repo_int8_mode={int8}: the {family.name} backend has no int8 mode "
            "(families with one: gpt, bloom, llama); fix: 0"
        )
    elif int8 and model.get("data_type") == "fp32":
        problems.append(
            f"triton_model_repo_int8_mode={int8} with fleet_model.data_type=fp32: int8 needs fp16 or bf16; "
            "fix: data_type fp16, or int8_mode 0"
        )
    return problems
