"""Read PyTorch's checkpoint format (pytorch_model.bin) with numpy alone, never running its code.

Since PyTorch 1.6, torch.save writes a zip archive: `<name>/data.pkl`, a pickle of the state dict
in which every tensor is a call to `torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, ...)` and every storage a persistent id `("storage", torch.<Type>Storage, key, location,
numel)`, and one stored (uncompressed) entry `<name>/data/<key>` per storage, raw little-endian.

A pickle is a program: torch.load(weights_only=False) runs whatever globals it names. Here the
unpickler knows only the few globals a state dict needs (the tensor and parameter rebuild
functions, the storage types, OrderedDict) and refuses every other one by name before anything is
called; the allowed ones build inert descriptions (which storage, offset, shape, strides), never
objects of a library. A tensor is read only when asked for, through a memory map of its storage's
entry in the archive (the zip stores it uncompressed), so memory stays flat as for safetensors.

The format before 1.6 (a bare pickle stream with its own magic number) and TorchScript archives
are refused with what to do instead.
"""

from __future__ import annotations

import io
import math
import pickle
import struct
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# torch.<Type>Storage -> numpy dtype (little-endian; the archive's byteorder entry may say big).
STORAGE_DTYPES = {
    "FloatStorage": "f4",
    "HalfStorage": "f2",
    "BFloat16Storage": "u2",  # bit patterns; widened to float32 by the caller
    "DoubleStorage": "f8",
    "LongStorage": "i8",
    "IntStorage": "i4",
    "ShortStorage": "i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
}
# The pre-1.6 format starts with a pickle (protocol 2) of torch.serialization's MAGIC_NUMBER, a LONG1.
_LEGACY_HEAD = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


class TorchFileError(Exception):
    """A pytorch_model.bin that cannot (or must not) be read."""


class RefusedGlobal(TorchFileError):
    """The pickle names a global that a state dict does not need: nothing was called."""


@dataclass(frozen=True)
class StorageRef:
    """One storage of the archive: its entry key, element type and element count."""

    key: str
    storage_type: str
    numel: int

    def __setstate__(self, _state):  # a pickle's BUILD must not reach into these
        raise pickle.UnpicklingError("refusing to set state on a storage")


@dataclass(frozen=True)
class TensorRef:
    """A tensor as the pickle describes it: a view (offset, size, stride in elements) of a storage."""

    storage: StorageRef
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    def __setstate__(self, _state):
        raise pickle.UnpicklingError("refusing to set state on a tensor")


@dataclass(frozen=True)
class _StorageType:
    name: str

    def __setstate__(self, _state):
        raise pickle.UnpicklingError("refusing to set state on a storage type")


def _ints(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(type(v) is int and v >= 0 for v in value):
        raise pickle.UnpicklingError(f"{what} must be a tuple of non-negative integers, got {value!r}")
    return value


def _rebuild_tensor(storage, storage_offset, size, stride, *_rest):
    """Stands for torch._utils._rebuild_tensor_v2 (requires_grad, hooks and metadata are ignored)."""
    if not isinstance(storage, StorageRef):
        raise pickle.UnpicklingError(f"a tensor's storage must come from the archive, got {type(storage).__name__}")
    if type(storage_offset) is not int or storage_offset < 0:
        raise pickle.UnpicklingError(f"bad storage offset {storage_offset!r}")
    shape, strides = _ints(size, "size"), _ints(stride, "stride")
    if len(shape) != len(strides):
        raise pickle.UnpicklingError(f"size {shape} and stride {strides} differ in rank")
    last = storage_offset + sum((n - 1) * s for n, s in zip(shape, strides))
    if math.prod(shape) and last >= storage.numel:
        raise pickle.UnpicklingError(
            f"a view (offset {storage_offset}, size {shape}, stride {strides}) past its storage of {storage.numel}"
        )
    return TensorRef(storage, storage_offset, shape, strides)


def _rebuild_parameter(data, _requires_grad=False, _hooks=None, *_rest):
    """Stands for torch._utils._rebuild_parameter(_with_state): a Parameter is its data here."""
    if not isinstance(data, TensorRef):
        raise pickle.UnpicklingError("a parameter must wrap a tensor")
    return data


def _ordered_dict(*args):
    """collections.OrderedDict, with at most an iterable of pairs (what a state dict pickles)."""
    if len(args) > 1:
        raise pickle.UnpicklingError("OrderedDict takes at most one argument")
    return OrderedDict(*args)


_ALLOWED = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    **{("torch", name): _StorageType(name) for name in STORAGE_DTYPES},
}


class _StateDictUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, keys: set[str]):
        super().__init__(io.BytesIO(data))
        self._keys = keys
        self._storages: dict[str, StorageRef] = {}

    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise RefusedGlobal(
                f"the pickle asks for {module}.{name}, which a state dict does not need: refused, nothing was run "
                "(a file that needs it is not plain weights; do not load it with torch.load either)"
            ) from None

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        _, storage_type, key, _location, numel = pid
        if not isinstance(storage_type, _StorageType) or not isinstance(key, str) or type(numel) is not int:
            raise pickle.UnpicklingError(f"malformed storage id {pid!r}")
        if key not in self._keys:
            raise pickle.UnpicklingError(f"storage {key!r} has no data entry in the archive")
        known = self._storages.setdefault(key, StorageRef(key, storage_type.name, numel))
        if known.storage_type != storage_type.name or known.numel != numel:
            raise pickle.UnpicklingError(f"storage {key!r} is described twice, differently")
        return known


def _data_offset(path: Path, handle, info: zipfile.ZipInfo) -> int:
    """Where a stored entry's bytes start in the file: after its local header."""
    handle.seek(info.header_offset)
    header = handle.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise TorchFileError(f"{path}: broken zip local header for {info.filename}")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_length + extra_length


class TorchFile:
    """The tensors of one pytorch_model.bin, by name, read lazily through memory maps."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with self.path.open("rb") as handle:
            magic = handle.read(4)
        if magic != b"PK\x03\x04":
            raise TorchFileError(self._not_zip_message())
        try:
            archive = zipfile.ZipFile(self.path)
        except zipfile.BadZipFile as err:
            raise TorchFileError(f"{self.path}: not a readable zip archive ({err})") from None
        try:
            with archive, self.path.open("rb") as handle:
                self._read_index(archive, handle)
        except zipfile.BadZipFile as err:  # a CRC that does not match: the file is damaged
            raise TorchFileError(f"{self.path}: a damaged archive ({err})") from None

    def _read_index(self, archive: zipfile.ZipFile, handle) -> None:
        """Unpickle the state dict (allowed globals only) and locate each storage's bytes."""
        names = archive.namelist()
        pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if any(n.endswith("/constants.pkl") for n in names):
            raise TorchFileError(f"{self.path}: a TorchScript archive (torch.jit.save), not a state dict")
        if len(pickles) != 1:
            raise TorchFileError(f"{self.path}: no single <name>/data.pkl in the archive: not torch.save's format")
        prefix = pickles[0][: -len("data.pkl")]
        order = archive.read(prefix + "byteorder").decode().strip() if prefix + "byteorder" in names else "little"
        if order not in ("little", "big"):
            raise TorchFileError(f"{self.path}: unknown byte order {order!r}")
        self._endian = "<" if order == "little" else ">"
        entries = {n[len(prefix) + len("data/") :]: archive.getinfo(n) for n in names
                   if n.startswith(prefix + "data/")}  # fmt: skip
        unpickler = _StateDictUnpickler(archive.read(pickles[0]), set(entries))
        try:
            state = unpickler.load()
        except TorchFileError as err:
            raise TorchFileError(f"{self.path}: {err}") from None
        except (pickle.UnpicklingError, TypeError, ValueError, EOFError, AttributeError, IndexError) as err:
            raise TorchFileError(f"{self.path}: not a state dict this reader accepts ({err})") from None
        if not isinstance(state, dict):
            raise TorchFileError(f"{self.path}: the pickle holds a {type(state).__name__}, not a state dict")
        bad = [k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, TensorRef)]
        if bad:
            raise TorchFileError(f"{self.path}: entries that are not tensors: {', '.join(map(str, bad[:5]))}")
        self.tensors: dict[str, TensorRef] = dict(state)
        self._offsets: dict[str, int] = {}
        for ref in {t.storage for t in self.tensors.values()}:
            info = entries[ref.key]
            if info.compress_type != zipfile.ZIP_STORED:
                raise TorchFileError(f"{self.path}: storage {ref.key} is compressed (torch.save never does)")
            itemsize = np.dtype(STORAGE_DTYPES[ref.storage_type]).itemsize
            if info.file_size != ref.numel * itemsize:
                raise TorchFileError(
                    f"{self.path}: storage {ref.key} has {info.file_size} bytes, "
                    f"the pickle says {ref.numel} x {itemsize}"
                )
            self._offsets[ref.key] = _data_offset(self.path, handle, info)

    def _not_zip_message(self) -> str:
        with self.path.open("rb") as handle:
            head = handle.read(len(_LEGACY_HEAD))
        if head == _LEGACY_HEAD:  # compared as bytes: nothing of the file is unpickled
            return (
                f"{self.path}: PyTorch's format from before 1.6 (not a zip archive), which this reader does not "
                "read: re-save it once where torch is installed (torch.save(torch.load(p, weights_only=True), p)) "
                "or convert the checkpoint to safetensors, then run again"
            )
        return f"{self.path}: not a PyTorch checkpoint (no zip archive)"

    def names(self) -> list[str]:
        return list(self.tensors)

    def dtype(self, name: str) -> str:
        return self.tensors[name].storage.storage_type

    def raw(self, name: str) -> np.ndarray:
        """The tensor in its stored element type (bfloat16 as uint16 bit patterns), a copy."""
        ref = self.tensors[name]
        dtype = np.dtype(self._endian + STORAGE_DTYPES[ref.storage.storage_type])
        if not math.prod(ref.shape):
            return np.zeros(ref.shape, dtype=dtype.newbyteorder("="))
        mapped = np.memmap(self.path, dtype=dtype, mode="r", offset=self._offsets[ref.storage.key],
                           shape=(ref.storage.numel,))  # fmt: skip
        try:
            view = np.lib.stride_tricks.as_strided(
                mapped[ref.offset :], shape=ref.shape, strides=[s * dtype.itemsize for s in ref.stride], writeable=False
            )
            return np.array(view, dtype=dtype.newbyteorder("="))
        finally:
            del mapped  # unmap: the pages leave the process
