"""Read a mesh-transformer-jax "slim" GPT-J checkpoint as the Hugging Face GPT-J tensors.

The GPT-J guide converts the slim step_383500 archive with FT's gptj_ckpt_convert.py, which needs
JAX (for one transpose and the bfloat16 dtype) and torch (for an fp16 cast). Neither is needed:

- The directory holds shard_0 .. shard_{n-1} (n = 8 for GPT-J-6B), each with parts 0.npz, 1.npz,
  ...; a part's arrays, in the npz's own order, are the next tensors of one fixed sequence. Every
  shard holds the same parts and arrays: its slice of each tensor.
- The sequence is haiku's parameter order (module names sorted as strings, so layer 10 comes
  after layer 1): the embedding's bias and weight, then per layer q, v, k and out weights, the
  feed-forward's input bias and weight, its output bias and weight, the layer norm's offset and
  scale; then the head's bias and weight and the final norm's offset and scale.
- bfloat16 arrays are stored as two-byte void ('V2'): their bits are bfloat16's, widened here to
  float32 by a shift.
- Linear weights are [in, out]. Column-split ones (q, k, v, fc_in, the head) join their shards
  along the last axis, row-split ones (out, fc_out, the embedding) along the first; split biases
  join end to end.
- The layer norms are used from the first shard only (the others keep their initial 0 and 1);
  the feed-forward's output bias and the embedding's bias are added once by every shard, so the
  full bias is the first shard's times n. Anything else where the shards must agree and do not
  is refused: that is not a slim GPT-J checkpoint (FT's script would fail on a reshape).
- Every tensor is rounded to float16 as FT's converter does (it raises on an overflow; so does
  this), and the embedding's bias is added to each embedding row in float16, which leaves the
  Hugging Face GPT-J layout (no embedding bias).

The tensors come one at a time: only the shards of the tensor asked for are read.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np

from .checkpoint import INDEXES, SINGLES, Checkpoint, CheckpointError, bf16_to_f32

# How a tensor's shards make the whole: joined along an axis, or agreeing copies (REPLICATED:
# the first shard's; SUMMED: the first times the number of shards, unless still at 0 or 1).
ROWS, COLUMNS, REPLICATED = "rows", "columns", "replicated"
_SHARD = re.compile(r"shard_(\d+)")


def is_slim(directory: Path) -> bool:
    return (Path(directory) / "shard_0" / "0.npz").is_file()


def tensor_order(num_layers: int) -> list[tuple[str, str]]:
    """(Hugging Face name, how its shards join), in the order the checkpoint stores them."""
    order = [("transformer.wte.bias", REPLICATED), ("transformer.wte.weight", ROWS)]
    for layer in sorted(map(str, range(num_layers))):
        h = f"transformer.h.{layer}."
        order += [
            (h + "attn.q_proj.weight", COLUMNS),
            (h + "attn.v_proj.weight", COLUMNS),
            (h + "attn.k_proj.weight", COLUMNS),
            (h + "attn.out_proj.weight", ROWS),
            (h + "mlp.fc_in.bias", COLUMNS),
            (h + "mlp.fc_in.weight", COLUMNS),
            (h + "mlp.fc_out.bias", REPLICATED),
            (h + "mlp.fc_out.weight", ROWS),
            (h + "ln_1.bias", REPLICATED),
            (h + "ln_1.weight", REPLICATED),
        ]
    order += [
        ("lm_head.bias", COLUMNS),
        ("lm_head.weight", COLUMNS),
        ("transformer.ln_f.bias", REPLICATED),
        ("transformer.ln_f.weight", REPLICATED),
    ]
    return order


def _as_f32(array: np.ndarray, where: str) -> np.ndarray:
    if array.dtype == np.dtype("V2"):  # bfloat16, as numpy without JAX stores it
        return bf16_to_f32(array.view(np.uint16))
    if array.dtype in (np.float16, np.float32):
        return array.astype(np.float32)
    raise CheckpointError(f"{where}: dtype {array.dtype} (readable: bfloat16 as V2, float16, float32)")


def _whole(name: str, how: str, shards: list[np.ndarray]) -> np.ndarray:
    """The full tensor (Hugging Face's layout: Linear weights [out, in]) from its shards."""
    n = len(shards)
    if how == COLUMNS:
        return np.concatenate(shards, axis=-1).T
    if how == ROWS:
        full = np.concatenate(shards, axis=0)
        return full if name.endswith("wte.weight") else full.T
    first, rest = shards[0], np.stack(shards[1:]) if n > 1 else np.zeros((0, *shards[0].shape), np.float32)
    if not (rest == rest[-1:]).all():
        raise CheckpointError(f"{name}: its {n} shards differ where the checkpoint keeps copies; not a slim GPT-J")
    if (rest == 0).all() or (rest == 1).all():  # used from the first shard only (initial values elsewhere)
        return first
    return first * n  # each shard adds its copy


class SlimCheckpoint:
    """The tensors of a slim GPT-J checkpoint directory under their Hugging Face names (float32
    holding float16 values), with the same interface as ftnative.checkpoint.Checkpoint."""

    family = "gptj"

    def __init__(self, directory: str | Path, config: dict):
        self.directory = Path(directory)
        self.config = config
        shard_dirs = sorted(
            (int(m.group(1)), p) for p in self.directory.iterdir() if (m := _SHARD.fullmatch(p.name)) and p.is_dir()
        )
        if [i for i, _ in shard_dirs] != list(range(len(shard_dirs))) or not shard_dirs:
            raise CheckpointError(f"{self.directory}: shard directories {[p.name for _, p in shard_dirs]} are not "
                                  "shard_0 .. shard_N")  # fmt: skip
        self.shards = [p for _, p in shard_dirs]
        try:
            layers = int(config["n_layer"])
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{self.directory}/config.json: no n_layer (a slim GPT-J needs its shape)") from None
        self._where = self._index(tensor_order(layers))

    def _arrays(self, shard: Path, part: int) -> list[str]:
        path = shard / f"{part}.npz"
        try:
            with zipfile.ZipFile(path) as archive:
                return [name[: -len(".npy")] for name in archive.namelist() if name.endswith(".npy")]
        except (OSError, zipfile.BadZipFile) as err:
            raise CheckpointError(f"{path}: not a readable npz ({err})") from None

    def _index(self, order: list[tuple[str, str]]) -> dict[str, tuple[str, int, str]]:
        where, names, part = {}, iter(order), 0
        while (self.shards[0] / f"{part}.npz").exists():
            keys = self._arrays(self.shards[0], part)
            for shard in self.shards[1:]:
                if self._arrays(shard, part) != keys:
                    raise CheckpointError(f"{shard}/{part}.npz: other arrays than {self.shards[0].name}/{part}.npz")
            for key in keys:
                name, how = next(names, (None, None))
                if name is None:
                    raise CheckpointError(
                        f"{self.directory}: more arrays than a GPT-J of {self.config['n_layer']} layers has "
                        f"({len(order)}); config n_layer does not match the checkpoint"
                    )
                where[name] = (how, part, key)
            part += 1
        if len(where) != len(order):
            raise CheckpointError(
                f"{self.directory}: {len(where)} arrays in {part} parts, a GPT-J of {self.config['n_layer']} layers "
                f"has {len(order)}; config n_layer does not match the checkpoint, or parts are missing"
            )
        for shard in self.shards[1:]:
            if (shard / f"{part}.npz").exists():
                raise CheckpointError(f"{shard}/{part}.npz: a part that {self.shards[0].name} does not have")
        return where

    def names(self) -> list[str]:
        return [name for name in self._where if name != "transformer.wte.bias"]

    def has(self, name: str) -> bool:
        return name in self._where and name != "transformer.wte.bias"

    def _read(self, name: str) -> np.ndarray:
        how, part, key = self._where[name]
        shards = []
        for shard in self.shards:
            with np.load(shard / f"{part}.npz", allow_pickle=False) as npz:
                shards.append(_as_f32(npz[key], f"{shard}/{part}.npz:{key} ({name})"))
        with np.errstate(over="ignore"):  # said below, as FT's converter says it
            half = _whole(name, how, shards).astype(np.float16)
        if not np.isfinite(half).all():
            raise CheckpointError(f"{name}: overflows float16 (FT's converter refuses it too)")
        return half

    def get(self, *candidates: str) -> np.ndarray:
        """The first of the candidate names present, as float32 (of float16 values)."""
        name = next((c for c in candidates if self.has(c)), None)
        if name is None:
            raise CheckpointError(f"{self.directory}: missing tensor {' or '.join(candidates)}")
        tensor = self._read(name)
        if name == "transformer.wte.weight":
            tensor = tensor + self._read("transformer.wte.bias")  # float16 arithmetic, as FT's converter
        return tensor.astype(np.float32)


def open_checkpoint(directory: str | Path) -> Checkpoint | SlimCheckpoint:
    """The checkpoint in `directory`: a Hugging Face one, or a slim GPT-J one (shard_N/ directories
    of npz parts with a config.json of its shape beside them) where it has no Hugging Face weights."""
    directory = Path(directory)
    if not is_slim(directory) or any((directory / name).exists() for name in INDEXES + SINGLES):
        return Checkpoint(directory)
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{directory}: a slim GPT-J needs a config.json of its shape ({err})") from None
    return SlimCheckpoint(directory, config)
