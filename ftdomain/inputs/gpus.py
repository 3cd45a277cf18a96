"""Given the host's GPUs: the containers' CUDA can build FT for them, bf16 runs on them, FT has int8
kernels for them where int8_mode is on, ft_image_sm covers them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.cuda import container_sms, cuda_sm, ft_int8_problem
from ftdomain.ft.families import FAMILIES


def gpu_problems(v: Mapping[str, Any], gpus: Mapping[str, Any]) -> list[str]:
    devices = v.get("fleet_gpu_devices")
    if not v.get("fleet_require_gpus") or not isinstance(devices, list):
        return []
    assigned = [d for d in gpus.get("devices") or [] if d.get("index") in devices]
    problems, kinds = [], {}  # (SM, GPU name) -> indices: one problem per kind of GPU, not per GPU
    for device in assigned:
        try:
            sm = cuda_sm(device.get("compute_capability"))
        except AnsibleFilterError as err:
            problems.append(f"GPU {device.get('index')} ({device.get('name')}): {str(err).split(': ', 1)[1]}")
            continue
        kinds.setdefault((sm, device.get("name")), []).append(str(device.get("index")))
    model = v.get("fleet_model") or {}
    for (sm, name), indices in kinds.items():
        which = f"GPU {', '.join(indices)} ({name}, SM {sm}"
        for container in ("fleet_ft_container_version", "fleet_triton_container_version"):
            try:
                table = container_sms(v.get(container))
            except AnsibleFilterError:
                continue  # reported with the fleet_* checks
            if sm not in table["sms"]:
                newer = "22.10 or later" if sm in ("89", "90") else "a newer release"
                problems.append(
                    f"{container}={v.get(container)}: its CUDA {table['cuda']} cannot build FT for {which}; "
                    f"it builds SM {', '.join(table['sms'])}); fix: {newer} (docs/variables.md: container "
                    "versions for each GPU)"
                )
        if isinstance(model, Mapping) and model.get("data_type") == "bf16" and int(sm) < 80:
            problems.append(f"fleet_model.data_type=bf16: {which}) has no bf16 (SM 80 or later); fix: data_type fp16")
    int8, family = v.get("triton_model_repo_int8_mode", 0), FAMILIES.get(str(model.get("family", "")))
    # an int8_mode the family has no kernels for at all is reported with the model repository's checks
    if int8 in (1, 2) and family is not None and family.int8:
        problem = ft_int8_problem(int8, [d.get("compute_capability") for d in assigned])
        if problem:
            problems.append(problem)
    sm_arg = v.get("ft_image_sm")
    if sm_arg and assigned:
        needed = {cuda_sm(d["compute_capability"]) for d in assigned if d.get("compute_capability")}
        given = set(str(sm_arg).split(","))
        if not needed <= given:
            problems.append(
                f"ft_image_sm={sm_arg!r}: does not cover the assigned GPUs (SM {', '.join(sorted(needed))}); "
                "fix: remove it (it follows the GPUs) or add those values"
            )
    return problems
