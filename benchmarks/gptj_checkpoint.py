"""Write a GPT-J-shaped Hugging Face checkpoint (config.json + model.safetensors) of any size,
streamed tensor by tensor, so making a 2 GB checkpoint needs a few MB of memory."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

_BLOCK = 1 << 22  # elements of random data, reused cyclically


def tensors(hidden: int, layers: int, vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    inter = 4 * hidden
    shapes = [("transformer.wte.weight", (vocab, hidden))]
    for i in range(layers):
        h = f"transformer.h.{i}."
        shapes += [
            (h + "ln_1.weight", (hidden,)), (h + "ln_1.bias", (hidden,)),
            (h + "attn.q_proj.weight", (hidden, hidden)), (h + "attn.k_proj.weight", (hidden, hidden)),
            (h + "attn.v_proj.weight", (hidden, hidden)), (h + "attn.out_proj.weight", (hidden, hidden)),
            (h + "mlp.fc_in.weight", (inter, hidden)), (h + "mlp.fc_in.bias", (inter,)),
            (h + "mlp.fc_out.weight", (hidden, inter)), (h + "mlp.fc_out.bias", (hidden,)),
        ]  # fmt: skip
    shapes += [
        ("transformer.ln_f.weight", (hidden,)), ("transformer.ln_f.bias", (hidden,)),
        ("lm_head.weight", (vocab, hidden)), ("lm_head.bias", (vocab,)),
    ]  # fmt: skip
    return shapes


def write(
    directory: Path, *, hidden: int = 1024, layers: int = 40, vocab: int = 8192, heads: int = 16, seed: int = 0
) -> int:
    """Write the checkpoint; return the size of model.safetensors in bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["GPTJForCausalLM"], "model_type": "gptj", "n_embd": hidden, "n_head": heads,
        "n_layer": layers, "n_positions": 2048, "rotary_dim": 64, "vocab_size": vocab, "n_inner": None,
        "bos_token_id": 0, "eos_token_id": 1, "layer_norm_epsilon": 1e-5,
    }  # fmt: skip
    (directory / "config.json").write_text(json.dumps(config))
    header, offset = {}, 0
    shapes = tensors(hidden, layers, vocab)
    for name, shape in shapes:
        size = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    block = np.random.default_rng(seed).standard_normal(_BLOCK, dtype=np.float32) * 0.02
    with (directory / "model.safetensors").open("wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        for _name, shape in shapes:
            remaining = int(np.prod(shape))
            while remaining:
                chunk = min(remaining, _BLOCK)
                handle.write(block[:chunk].tobytes())
                remaining -= chunk
    return 8 + len(raw) + offset


def to_pytorch_bin(directory: Path) -> int:
    """Rewrite the checkpoint's model.safetensors as pytorch_model.bin, the format of checkpoints
    published before safetensors (torch.save's zip archive; needs torch, as their authors had);
    return its size in bytes."""
    import torch  # noqa: PLC0415 - only this writer needs it
    from safetensors.torch import load_file  # noqa: PLC0415

    source, target = directory / "model.safetensors", directory / "pytorch_model.bin"
    torch.save(load_file(source), target)
    source.unlink()
    return target.stat().st_size
