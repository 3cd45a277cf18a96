"""Read Hugging Face checkpoints tensor by tensor, with bounded memory.

safetensors files are parsed here (8-byte header length, JSON header, raw data) and each tensor
is read through a memory map that is dropped after use, so only the tensors being converted are
resident. pytorch_model.bin files (torch.save's zip archive) are read the same way, with numpy
alone and a pickle reader that runs nothing from the file (ftnative.torchfile). Sharded
checkpoints (model.safetensors.index.json, pytorch_model.bin.index.json) are followed.
ftnative.jaxslim.open_checkpoint opens these or a slim GPT-J checkpoint of mesh-transformer-jax.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from .torchfile import TorchFile, TorchFileError

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}


# The weights of a Hugging Face checkpoint: an index of shards (preferred), else one file.
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
SINGLES = ("model.safetensors", "pytorch_model.bin")


class CheckpointError(Exception):
    """A checkpoint that cannot be read as asked."""


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounding to nearest even (NaN stays NaN)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(values)
    return np.where(nan, (bits >> 16) | 0x40, rounded).astype(np.uint16)


def _refuse_lfs_pointer(path: Path) -> None:
    if path.stat().st_size < 1024 and path.read_bytes().startswith(b"version https://git-lfs"):
        raise CheckpointError(f"{path}: a git-lfs pointer, not the weights (run git lfs pull)")


class _SafetensorsFile:
    def __init__(self, path: Path):
        self.path = path
        with path.open("rb") as handle:
            raw = handle.read(8)
            if len(raw) != 8:
                raise CheckpointError(f"{path}: not a safetensors file (too short)")
            (length,) = struct.unpack("<Q", raw)
            try:
                header = json.loads(handle.read(min(length, 100_000_000)))
            except ValueError as err:
                raise CheckpointError(f"{path}: unreadable safetensors header ({err})") from None
        header.pop("__metadata__", None)
        self.base = 8 + length
        self.entries = header

    def names(self) -> list[str]:
        return list(self.entries)

    def get(self, name: str) -> np.ndarray:
        entry = self.entries[name]
        dtype = _ST_DTYPES.get(entry["dtype"])
        if dtype is None:
            raise CheckpointError(f"{self.path}: tensor {name} has dtype {entry['dtype']} (readable: F32, F16, BF16)")
        start, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        mapped = np.memmap(self.path, dtype=dtype, mode="r", offset=self.base + start, shape=shape or (1,))
        try:
            array = bf16_to_f32(mapped) if entry["dtype"] == "BF16" else np.array(mapped, dtype=np.float32)
        finally:
            del mapped  # unmap: the pages leave the process
        if array.nbytes // 4 * np.dtype(dtype).itemsize != end - start:
            raise CheckpointError(f"{self.path}: tensor {name} has {end - start} bytes for shape {shape}")
        return array.reshape(shape)


class _TorchFile:
    """pytorch_model.bin through ftnative.torchfile: numpy only, no code from the file runs."""

    def __init__(self, path: Path):
        try:
            self.file = TorchFile(path)
        except TorchFileError as err:
            raise CheckpointError(str(err)) from None

    def names(self) -> list[str]:
        return self.file.names()

    def get(self, name: str) -> np.ndarray:
        raw = self.file.raw(name)
        return bf16_to_f32(raw) if self.file.dtype(name) == "BFloat16Storage" else raw.astype(np.float32, copy=False)


class Checkpoint:
    """All tensors of a Hugging Face checkpoint directory, by name."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise CheckpointError(f"{self.directory}: not a directory")
        self._files: dict[Path, object] = {}
        self._where: dict[str, Path] = {}
        for index_name in INDEXES:
            index = self.directory / index_name
            if index.exists():
                weight_map = json.loads(index.read_text())["weight_map"]
                self._where = {name: self.directory / file for name, file in weight_map.items()}
                break
        else:
            for single in SINGLES:
                path = self.directory / single
                if path.exists():
                    _refuse_lfs_pointer(path)
                    self._where = dict.fromkeys(self._open(path).names(), path)
                    break
        if not self._where:
            raise CheckpointError(f"{self.directory}: no model.safetensors, pytorch_model.bin or index json found")
        for path in set(self._where.values()):
            if not path.exists():
                raise CheckpointError(f"{self.directory}: the index names {path.name}, which is missing")
            _refuse_lfs_pointer(path)
        self.config = json.loads((self.directory / "config.json").read_text())

    def _open(self, path: Path):
        if path not in self._files:
            self._files[path] = _TorchFile(path) if path.suffix == ".bin" else _SafetensorsFile(path)
        return self._files[path]

    def names(self) -> list[str]:
        return list(self._where)

    def has(self, name: str) -> bool:
        return name in self._where

    def get(self, *candidates: str) -> np.ndarray:
        """The first of the candidate names present, as float32."""
        for name in candidates:
            if name in self._where:
                return self._open(self._where[name]).get(name)
        raise CheckpointError(f"{self.directory}: missing tensor {' or '.join(candidates)}")
