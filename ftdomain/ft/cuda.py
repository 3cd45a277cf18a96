"""GPU architecture and driver compatibility: SM values for FT builds, drivers for Triton containers."""

from __future__ import annotations

import re
from typing import Any

from ftdomain.errors import AnsibleFilterError

# SM values FT's CMake builds kernels for; others silently fall back to a default set.
FT_SMS = ("60", "61", "70", "75", "80", "86", "89", "90")

# NGC Triton container -> (CUDA, minimum driver branch, data-center compatibility drivers),
# from NVIDIA's Triton release notes ("Driver Requirements"). Data-center GPUs may run a
# container on one of the listed drivers (or a later release of the same branch).
_R22_EARLY = ("418.40", "440.33", "450.51", "460.27", "470.57")
_R22_MID = ("450.51", "470.57", "510.47")
_R22_LATE = (*_R22_MID, "515.65")
_R23_MID = (*_R22_LATE, "525.85")
_R23_LATE = ("450.51", "470.57", "510.47", "525.85")
_R24 = ("470.57", "525.85", "535.86")
TRITON_DRIVERS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "22.03": ("11.6", 510, _R22_EARLY),
    "22.04": ("11.6", 510, _R22_EARLY),
    "22.05": ("11.7", 515, _R22_MID),
    "22.06": ("11.7", 515, _R22_MID),
    "22.07": ("11.7", 515, _R22_MID),
    "22.08": ("11.7", 515, _R22_MID),
    "22.10": ("11.8", 520, _R22_LATE),
    "22.11": ("11.8", 520, _R22_LATE),
    "22.12": ("11.8", 520, _R22_LATE),
    "23.03": ("12.1", 530, _R22_LATE),
    "23.04": ("12.1", 530, _R23_MID),
    "23.05": ("12.1", 530, _R23_MID),
    "23.06": ("12.1", 530, _R23_MID),
    "23.07": ("12.1", 530, _R23_MID),
    "23.08": ("12.2", 535, _R23_LATE),
    "23.10": ("12.2", 535, _R23_LATE),
    "23.12": ("12.3", 545, (*_R23_LATE, "535.86")),
    "24.01": ("12.3", 545, _R24),
    "24.04": ("12.4", 545, _R24),
    "24.05": ("12.4", 545, _R24),
    "24.07": ("12.5", 555, (*_R24, "545.23")),
    "24.10": ("12.6", 560, (*_R24, "545.23")),
    "24.12": ("12.6", 560, (*_R24, "545.23")),
    "25.04": ("12.9", 575, ()),
}


# The SM values nvcc of a CUDA release can build kernels for, among FT_SMS: CUDA 11.1 added SM 86,
# CUDA 11.8 added SM 89 (Ada) and SM 90 (Hopper). FT's build and the backend's build use the
# CUDA of the container they build on (FT-TRITON-FACTS.md section 6: Hopper needs 22.10 or later).
def cuda_buildable_sms(cuda: str) -> tuple[str, ...]:
    version = tuple(int(x) for x in cuda.split("."))
    newer = (("86", (11, 1)), ("89", (11, 8)), ("90", (11, 8)))
    return tuple(sm for sm in FT_SMS if all(sm != new or version >= since for new, since in newer))


def container_sms(container_version: Any) -> dict[str, Any]:
    """The CUDA of an NGC container release and the SM values a build in it can target."""
    need = triton_min_driver(container_version)
    return {"container": need["container"], "cuda": need["cuda"], "sms": list(cuda_buildable_sms(need["cuda"]))}


def _one_sm(cc: Any) -> str:
    text = str(cc).strip().lower().removeprefix("sm_")
    match = re.fullmatch(r"(\d{1,2})\.(\d)", text) or re.fullmatch(r"(\d)(\d)", text)
    if isinstance(cc, bool) or not match:
        raise AnsibleFilterError(f"cuda_sm: compute capability {cc!r} is not of the form MAJOR.MINOR (e.g. 8.0, 9.0)")
    sm = match.group(1) + match.group(2)
    if sm not in FT_SMS:
        raise AnsibleFilterError(
            f"cuda_sm: compute capability {cc!r} (SM {sm}) is not one FT builds kernels for "
            f"(valid SM: {', '.join(FT_SMS)})"
        )
    return sm


def cuda_sm(compute_capability: Any) -> str:
    if isinstance(compute_capability, list | tuple):
        if not compute_capability:
            raise AnsibleFilterError("cuda_sm: got an empty list of compute capabilities (a host with no GPU?)")
        return ",".join(sorted({_one_sm(cc) for cc in compute_capability}, key=int))
    return _one_sm(compute_capability)


# The SM values FT df4a753's int8 kernels dispatch to, per int8_mode: weight-only int8 (1) through
# the fpA_intB GEMMs, whose weights cutlass_preprocessors.cc lays out for SM 70 to 89
# (getLayoutDetailsForTransform); SmoothQuant (2) through int8_gemm_template.h, SM 80 to 89. On any
# other GPU FT aborts as it loads the weights: "Unsupported Arch" from int8_mode 1 on an H100
# (SM 90; docs/gpu-tier.md, "int8").
FT_INT8_SMS: dict[int, tuple[int, int]] = {1: (70, 89), 2: (80, 89)}


def ft_int8_problem(int8_mode: Any, compute_capabilities: Any) -> str:
    """'' when FT's kernels for int8_mode run on every one of the GPUs' compute capabilities
    (MAJOR.MINOR, as ansible_local.gpus lists them), else why not and the fix. A capability FT
    builds no kernels for at all (or none known) is left to the GPU checks, which report it."""
    mode = int(int8_mode or 0)
    if mode not in FT_INT8_SMS:
        return ""
    low, high = FT_INT8_SMS[mode]
    outside = set()
    for cc in compute_capabilities or []:
        try:
            sm = int(_one_sm(cc))
        except AnsibleFilterError:
            continue
        if not low <= sm <= high:
            outside.add(str(cc))
    if not outside:
        return ""
    return (
        f"triton_model_repo_int8_mode={mode} on compute capability {', '.join(sorted(outside))}: FT's int8 kernels "
        f"(int8_mode {mode}) run on SM {low} to {high} only, and FT aborts loading the weights elsewhere "
        f'("Unsupported Arch"); fix: int8_mode 0 on these GPUs (fp16 weights: a smaller max_batch_size if the '
        "memory plan needs it)"
    )


def triton_min_driver(container_version: Any) -> dict[str, Any]:
    if not isinstance(container_version, str):
        raise AnsibleFilterError(
            f"triton_min_driver: container version {container_version!r} must be a string like '22.04' "
            "(quote it in YAML: unquoted 22.10 is the number 22.1)"
        )
    version = container_version.strip().removesuffix("-py3")
    if version not in TRITON_DRIVERS:
        raise AnsibleFilterError(
            f"triton_min_driver: unknown Triton container version {container_version!r} "
            f"(known: {', '.join(TRITON_DRIVERS)})"
        )
    cuda, branch, datacenter = TRITON_DRIVERS[version]
    return {"container": version, "cuda": cuda, "min_driver": branch, "datacenter_drivers": list(datacenter)}


def _version_tuple(text: str, what: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        raise AnsibleFilterError(f"triton_driver_ok: {what} {text!r} is not a driver version like 535.104.05")
    return tuple(int(x) for x in text.split("."))


def triton_driver_ok(driver_version: Any, container_version: Any, datacenter: bool = False) -> dict[str, Any]:
    need = triton_min_driver(container_version)
    have = _version_tuple(str(driver_version).strip(), "driver_version")
    if len(have) == 1:  # a bare branch ("535"): the newest release of that branch
        have = (have[0], 10**6)
    if have[0] >= need["min_driver"]:
        return {"ok": True, "reason": f"driver {driver_version} >= R{need['min_driver']}"}
    if datacenter:
        for compat in need["datacenter_drivers"]:
            floor = _version_tuple(compat, "compatibility driver")
            if have[0] == floor[0] and have >= floor:
                return {
                    "ok": True,
                    "reason": f"driver {driver_version} is a data-center compatibility branch (>= {compat})",
                }
    branches = ", ".join(f">= {c} (R{c.split('.')[0]})" for c in need["datacenter_drivers"])
    hint = f"; a data-center GPU may also use {branches}" if need["datacenter_drivers"] else ""
    return {
        "ok": False,
        "reason": (
            f"driver {driver_version} is too old for Triton {need['container']} "
            f"(CUDA {need['cuda']}): needs R{need['min_driver']} or later{hint}"
        ),
    }
