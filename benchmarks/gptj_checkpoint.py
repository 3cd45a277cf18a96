"""Write a GPT-J-shaped Hugging Face checkpoint (config.json + model.safetensors) of any size,
streamed tensor by tensor, so making a 2 GB checkpoint needs a few MB of memory; and rewrite a
checkpoint as pytorch_model.bin (single or sharded), as checkpoints from before safetensors are."""

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


def to_pytorch_bin(directory: Path, shards: int = 1) -> int:
    """Rewrite a checkpoint's model.safetensors in the layout of checkpoints published before
    safetensors, with the same tensor names and dtypes: pytorch_model.bin (torch.save's zip
    archive; needs torch, as their authors had), or with shards > 1 that many
    pytorch_model-0000i-of-0000n.bin files and pytorch_model.bin.index.json. Returns the bytes
    of the weight files."""
    import json  # noqa: PLC0415

    import torch  # noqa: PLC0415 - only this writer needs it
    from safetensors.torch import load_file  # noqa: PLC0415

    source = directory / "model.safetensors"
    state = load_file(source)
    names = list(state)
    if shards <= 1:
        torch.save(state, directory / "pytorch_model.bin")
        written = [directory / "pytorch_model.bin"]
    else:
        shards = min(shards, len(names))
        weight_map, written = {}, []
        for number in range(1, shards + 1):
            file = directory / f"pytorch_model-{number:05d}-of-{shards:05d}.bin"
            chunk = names[(number - 1) * len(names) // shards : number * len(names) // shards]
            torch.save({k: state[k] for k in chunk}, file)
            weight_map.update(dict.fromkeys(chunk, file.name))
            written.append(file)
        index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())},
                 "weight_map": weight_map}  # fmt: skip
        (directory / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2) + "\n")
    source.unlink()
    return sum(p.stat().st_size for p in written)
