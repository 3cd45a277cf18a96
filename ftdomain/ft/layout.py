"""Where a model's shards live and what a correct `<tp>-gpu` directory holds."""

from __future__ import annotations

from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.families import DTYPE_BYTES, check_dtype, get_family
from ftdomain.ft.sizes import positive_int, split_tp
from ftdomain.ft.tensors import dims, numel, shard_shape, weight_files


def ft_shard_dir(model_dir: Any, tp: Any) -> str:
    if not isinstance(model_dir, str) or not model_dir.strip("/"):
        raise AnsibleFilterError(
            f"ft_shard_dir: model_dir must be a model's Triton repository directory, got {model_dir!r}"
        )
    tp_n = positive_int(tp, "tensor_para_size", "ft_shard_dir")
    return f"{model_dir.rstrip('/')}/fastertransformer/1/{tp_n}-gpu"


def ft_expected_files(family: Any, params: Any, tp: Any, weight_dtype: Any) -> list[dict[str, Any]]:
    fam = get_family(family, "ft_expected_files")
    dtype = check_dtype(fam, weight_dtype, "ft_expected_files")
    tp_n = split_tp(params, tp, "ft_expected_files")
    d = dims(params, "ft_expected_files")
    if any("wpe" in t.name for t in fam.global_tensors(params)) and d.max_pos <= 0:
        raise AnsibleFilterError("ft_expected_files: params lack max_pos_seq_len, needed for model.wpe.bin")
    width = DTYPE_BYTES[dtype]
    files = [
        {"name": name, "bytes": numel(shard_shape(tensor, d, tp_n)) * width}
        for name, tensor, _rank in weight_files(fam, params, tp_n)
    ]
    return sorted(files, key=lambda f: f["name"])


def ft_weight_bytes_per_gpu(family: Any, params: Any, tp: Any, data_type: Any) -> int:
    """Bytes of weights one GPU holds at inference data_type: its rank's split tensors plus every
    replicated one (FT casts the files to data_type on load)."""
    fam = get_family(family, "ft_weight_bytes_per_gpu")
    if data_type not in DTYPE_BYTES:
        raise AnsibleFilterError(
            f"ft_weight_bytes_per_gpu: data_type {data_type!r} is not one FT serves (valid: {', '.join(DTYPE_BYTES)})"
        )
    tp_n = split_tp(params, tp, "ft_weight_bytes_per_gpu")
    d = dims(params, "ft_weight_bytes_per_gpu")
    elements = sum(
        numel(shard_shape(tensor, d, tp_n))
        for _name, tensor, rank in weight_files(fam, params, tp_n)
        if rank in (None, 0)
    )
    return elements * DTYPE_BYTES[data_type]


def ft_parameter_count(family: Any, params: Any) -> int:
    """Parameters of the model as FT stores them (the sum of ft_expected_files at tp 1, in elements)."""
    fam = get_family(family, "ft_parameter_count")
    d = dims(params, "ft_parameter_count")
    return sum(numel(tensor.shape(d)) for _name, tensor, _rank in weight_files(fam, params, 1))


def _ini_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def ft_config_ini(params: Any, family: Any, weight_dtype: Any, tp: Any) -> str:
    fam = get_family(family, "ft_config_ini")
    dtype = check_dtype(fam, weight_dtype, "ft_config_ini")
    tp_n = split_tp(params, tp, "ft_config_ini")
    missing = [k for k in fam.ini_required_keys if k not in params]
    if missing:
        raise AnsibleFilterError(
            f"ft_config_ini: params lack {', '.join(missing)}, required in [{fam.ini_section}] "
            f"for {fam.name} (pass the result of ft_model_params(hf_config, '{fam.name}'))"
        )
    keys = list(fam.ini_required_keys)
    # The family's optional keys that ft_model_params found, after the required ones.
    optional = (
        "rotary_embedding",
        "max_pos_seq_len",
        "layernorm_eps",
        "use_gptj_residual",
        "has_positional_encoding",
        "has_pre_decoder_layernorm",
        "has_post_decoder_layernorm",
        "use_attention_linear_bias",
    )
    keys += [k for k in optional if k in params and k not in keys]
    lines = [f"[{fam.ini_section}]"]
    lines += [f"{key} = {_ini_value(params[key])}" for key in keys]
    lines += [f"weight_data_type = {dtype}", f"tensor_para_size = {tp_n}"]
    if fam.name == "bloom":
        lines.append("model_variant = bloom-pre")  # as FT's converter and all_models write it
    return "\n".join(lines) + "\n"
