"""A host's GPU memory plan: ftdomain.ft.memory's figures for the settings the host serves with (its
model, tensor and pipeline parallelism, its model repository's max_batch_size and int8_mode, the
longest request its gateway lets in), against the smallest GPU it is given."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.gateway import model_context_length
from ftdomain.ft.cuda import ft_int8_problem
from ftdomain.ft.families import get_family
from ftdomain.ft.memory import MIB, ft_memory_fit, ft_memory_plan
from ftdomain.ft.model import ft_model_params
from ftdomain.inputs.derived import role_defaults

_LABELS = {
    "weights": "weights",
    "kv_cache": "key/value cache",
    "context": "context phase",
    "decoding": "decoding",
    "overhead": "runtime",
}


def _mib(value: int) -> str:
    return f"{value:,}"


def fleet_memory_plan(provided: Any, model: Any, config: Any, gpus: Any) -> dict[str, Any]:
    """The plan of one host: {plan (ft_memory_plan's), fit (ft_memory_fit's), capacity_mib,
    gpu_mib, summary, problem ('' when it fits)}. triton_model_repo_max_batch_size 0 asks for the
    largest batch that fits: the plan is made for it (plan.max_batch_size, which the model
    repository then serves with).

    provided: the host's variables (fleet_* and the roles' prefixed ones; roles' defaults fill the
    rest): fleet_tensor_para_size, fleet_pipeline_para_size, fleet_gpu_devices,
    triton_model_repo_max_batch_size, triton_model_repo_int8_mode, gateway_context_length,
    gateway_context_length_fallback, gateway_max_best_of (the beam width: FT runs a batch at its first
    request's), preflight_gpu_memory_fraction, preflight_gpu_overhead_mib. model: fleet_model resolved
    (family, data_type). config: the model's config.json. gpus: the gpus local fact (devices with
    index and memory_mib)."""
    for name, value in (("provided", provided), ("model", model), ("config", config), ("gpus", gpus)):
        if not isinstance(value, Mapping):
            raise AnsibleFilterError(f"fleet_memory_plan: {name} must be a dict, got {type(value).__name__}")
    v = {**role_defaults(), **provided}
    family = model.get("family")
    params = ft_model_params(config, family)
    context = int(v.get("gateway_context_length") or 0) or model_context_length(
        config, int(v.get("gateway_context_length_fallback") or 2048)
    )
    asked = int(v.get("triton_model_repo_max_batch_size") or 0)  # 0: the largest that fits
    options = {
        "data_type": model.get("data_type"),
        "int8_mode": v.get("triton_model_repo_int8_mode", 0),
        "tp": v.get("fleet_tensor_para_size", 1),
        "pp": v.get("fleet_pipeline_para_size", 1),
        "max_batch_size": asked or 1,
        "beam_width": v.get("gateway_max_best_of", 1),
        "context": context,
        "overhead_mib": v.get("preflight_gpu_overhead_mib", 0),
    }
    devices = v.get("fleet_gpu_devices") or []
    assigned = [d for d in gpus.get("devices") or [] if d.get("index") in devices]
    sizes = [int(d["memory_mib"]) for d in assigned if d.get("memory_mib")]
    fraction = float(v.get("preflight_gpu_memory_fraction", 0.9))
    if not asked and sizes:  # the largest batch the smallest GPU holds (at least 1, for the plan's figures)
        options["max_batch_size"] = max(ft_memory_fit(family, params, options, int(min(sizes) * fraction))
                                        ["max_batch_size"], 1)  # fmt: skip
    plan = ft_memory_plan(family, params, options)
    parts = ", ".join(f"{_LABELS[k]} {_mib(-(-b // MIB))}" for k, b in plan["bytes"].items())
    where = (
        f"max_batch_size {plan['max_batch_size']} x beam {plan['beam_width']} at {_mib(context)} tokens "
        f"(prompt + answer, the gateway's context), {plan['data_type']}"
        + (f" int8_mode {plan['int8_mode']}" if plan["int8_mode"] else "")
        + f", tp {plan['tp']} x pp {plan['pp']}"
    )
    summary = f"{_mib(plan['total_mib'])} MiB per GPU at FT's peak ({parts}) for {where}"
    result: dict[str, Any] = {"plan": plan, "fit": {}, "capacity_mib": 0, "gpu_mib": 0, "summary": summary,
                              "problem": ""}  # fmt: skip
    if not sizes:
        if not asked:
            result["problem"] = ("triton_model_repo_max_batch_size=0 asks for the largest batch the GPU memory plan "
                                 f"fits, but fleet_gpu_devices={devices} name no GPU whose memory this host reports; "
                                 "fix: set a max_batch_size")  # fmt: skip
        return result
    gpu_mib = min(sizes)
    capacity = int(gpu_mib * fraction)
    fit = ft_memory_fit(family, params, options, capacity)
    result.update(fit=fit, capacity_mib=capacity, gpu_mib=gpu_mib)
    result["summary"] = f"{summary}; {int(fraction * 100)}% of the smallest assigned GPU: {_mib(capacity)} MiB" + (
        " (max_batch_size 0: the largest that fits)" if not asked else ""
    )
    if plan["total_mib"] > capacity:
        fixes = []
        if fit["max_batch_size"]:
            fixes.append(f"triton_model_repo_max_batch_size: {fit['max_batch_size']} fits")
        if fit["context"] >= 2:
            fixes.append(f"gateway_context_length: {fit['context']} fits at max_batch_size {plan['max_batch_size']}")
        if plan["beam_width"] > 1:
            fixes.append(f"a smaller gateway_max_best_of (the plan counts {plan['beam_width']} beams per request)")
        fixes.append("more GPUs (a larger tensor-parallel size)")
        ccs = [d.get("compute_capability") for d in assigned]
        if get_family(family).int8 and not plan["int8_mode"] and not ft_int8_problem(1, ccs):
            fixes.append("triton_model_repo_int8_mode: 1 (weight-only int8)")
        result["problem"] = (
            f"fleet_model {model.get('name')}: FT needs {summary}, more than {int(fraction * 100)}% of the smallest "
            f"assigned GPU ({_mib(gpu_mib)} MiB: {_mib(capacity)}); a full batch at the longest lengths would fail "
            f"with CUDA out of memory; fix: {'; or '.join(fixes)}"
        )
    return result
