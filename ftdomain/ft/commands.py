"""The argv of the upstream tools: the family's HF converter and gpt_gemm."""

from __future__ import annotations

import os
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.families import GEMM_DATA_TYPES, check_dtype, get_family
from ftdomain.ft.sizes import positive_int, require_params, split_tp

# The GPT-J converter's --n-layers default.
_GPTJ_DEFAULT_LAYERS = 28


def _path(value: Any, what: str, filter_name: str) -> str:
    if not isinstance(value, str) or not value:
        raise AnsibleFilterError(f"{filter_name}: {what} must be a non-empty path, got {value!r}")
    return value


def ft_converter_argv(
    family: Any,
    ckpt_dir: Any,
    out_dir: Any,
    tp: Any,
    weight_dtype: Any = "fp32",
    num_layer: Any = None,
    model_name: Any = None,
    processes: Any = None,
) -> list[str]:
    name = "ft_converter_argv"
    fam = get_family(family, name)
    ckpt = _path(ckpt_dir, "ckpt_dir", name)
    out = _path(out_dir, "out_dir", name)
    tp_s = str(positive_int(tp, "tensor_para_size", name))
    dtype = check_dtype(fam, weight_dtype, name)
    label = model_name or os.path.basename(ckpt.rstrip("/")) or fam.name
    procs = [] if processes is None else ["-p", str(positive_int(processes, "processes", name))]
    if procs and fam.name in ("gptj", "llama"):
        raise AnsibleFilterError(f"{name}: the {fam.name} converter takes no process count (processes must be None)")
    dtype_flag = [] if dtype == "fp32" else ["-weight_data_type", dtype]

    if fam.name == "gptj":
        argv = ["--ckpt-dir", ckpt, "--output-dir", out, "--n-inference-gpus", tp_s]
        if num_layer is not None:
            layers = positive_int(num_layer, "num_layer", name)
            if layers != _GPTJ_DEFAULT_LAYERS:
                argv += ["--n-layers", str(layers)]
    elif fam.name == "gpt":
        argv = ["-i", ckpt, "-o", out, "-i_g", tp_s, *procs, *dtype_flag]
    elif fam.name == "gptneox":
        argv = ["-i", ckpt, "-o", out, "-i_g", tp_s, "-m_n", label, *procs, *dtype_flag]
    elif fam.name == "llama":
        argv = ["-i", ckpt, "-o", out, "-i_g", tp_s, "-m_n", label, *dtype_flag]
    else:  # bloom
        argv = ["-i", ckpt, "-o", out, "-tp", tp_s, *procs] + ([] if dtype == "fp32" else ["-dt", dtype])
    return [fam.converter, *argv]


def ft_converter_imports(family: Any) -> list[dict[str, Any]]:
    """What the family's upstream converter imports beyond the FT image: statement, requirements
    (none when the image must bring it) and cflags, for ftnative.converter_deps."""
    fam = get_family(family, "ft_converter_imports")
    return [
        {"statement": i.statement, "requirements": list(i.requirements), "cflags": i.cflags}
        for i in fam.converter_imports
    ]


def ft_gemm_argv(
    params: Any,
    batch_size: Any,
    beam_width: Any,
    max_input_len: Any,
    data_type: Any,
    tp: Any,
    binary: str = "gpt_gemm",
) -> list[str]:
    name = "ft_gemm_argv"
    sizes = require_params(params, ("head_num", "size_per_head", "inter_size", "vocab_size"), name)
    if data_type in GEMM_DATA_TYPES:
        code = GEMM_DATA_TYPES[data_type]
    elif data_type in GEMM_DATA_TYPES.values() and not isinstance(data_type, bool):
        code = data_type
    else:
        valid = ", ".join(f"{k} ({v})" for k, v in GEMM_DATA_TYPES.items())
        raise AnsibleFilterError(f"{name}: data_type {data_type!r} is not known to gpt_gemm (valid: {valid})")
    tp_n = split_tp(params, tp, name)
    values = [
        positive_int(batch_size, "batch_size", name),
        positive_int(beam_width, "beam_width", name),
        positive_int(max_input_len, "max_input_len", name),
        sizes["head_num"],
        sizes["size_per_head"],
        sizes["inter_size"],
        sizes["vocab_size"],
        code,
        tp_n,
    ]
    return [binary, *map(str, values)]
