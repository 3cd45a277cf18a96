"""pytorch_model.bin read with numpy alone (ftnative.torchfile), proven against torch itself.

torch writes the checkpoints here; the reader must give torch.load's tensors bit for bit (every
dtype, views of a shared storage with offsets and strides, a sharded index), refuse the pre-1.6
format and anything a state dict does not need without running it, and convert a .bin checkpoint
to the very bytes of the same checkpoint in safetensors, for every family. The conversion itself
runs in a child process whose torch import is blocked: a GPU host after the gpu_hosts stage has
numpy and no torch.
"""

from __future__ import annotations

import filecmp
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.gptj_checkpoint import to_pytorch_bin  # noqa: E402
from ftnative.checkpoint import Checkpoint, CheckpointError, _TorchFile  # noqa: E402
from ftnative.torchfile import TorchFile, TorchFileError  # noqa: E402
from tests.test_ftnative import FAMILIES, make_model  # noqa: E402

_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
         torch.float64: torch.int64}  # fmt: skip


def torch_bits(tensor) -> np.ndarray:
    """A tensor's stored bits as numpy, the way torch itself sees them."""
    tensor = tensor.contiguous()
    if tensor.dtype in _BITS:
        return tensor.view(_BITS[tensor.dtype]).numpy()
    return tensor.numpy()


def our_bits(raw: np.ndarray) -> np.ndarray:
    width = {4: np.int32, 2: np.int16, 8: np.int64}
    return raw.view(width[raw.dtype.itemsize]) if raw.dtype.kind in "fu" and raw.dtype.itemsize > 1 else raw


def assert_same_as_torch(path: Path) -> None:
    expected = torch.load(path, map_location="cpu", weights_only=True)
    ours = TorchFile(path)
    assert ours.names() == list(expected)
    for name, tensor in expected.items():
        raw = ours.raw(name)
        assert raw.shape == tuple(tensor.shape), name
        assert np.array_equal(our_bits(raw), torch_bits(tensor)), name


def test_every_dtype_and_shared_strided_views_equal_torch_load(tmp_path):
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(6, 10, generator=generator)
    state = {
        "fp32": torch.randn(5, 7, generator=generator),
        "fp16": torch.randn(33, generator=generator).half(),
        "bf16": torch.randn(4, 9, generator=generator).bfloat16(),
        "fp64": torch.randn(3, 2, generator=generator).double(),
        "int64": torch.arange(11),
        "int32": torch.arange(7, dtype=torch.int32),
        "int8": torch.arange(-5, 5, dtype=torch.int8),
        "uint8": torch.arange(200, 210, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.25),
        "empty": torch.zeros(0, 4),
        # one storage, several views: the whole, a transpose, an offset slice, a strided column
        "base": base,
        "transposed": base.t(),
        "offset_slice": base[2:, 3:8],
        "column_step": base[::2, 1],
        "parameter": torch.nn.Parameter(torch.randn(4, generator=generator)),
    }
    path = tmp_path / "pytorch_model.bin"
    torch.save(state, path)
    assert_same_as_torch(path)
    ours = TorchFile(path)
    assert len({ref.storage.key for name, ref in ours.tensors.items() if name in ("base", "transposed",
                "offset_slice", "column_step")}) == 1  # fmt: skip
    # what the converter reads: float32, bf16 widened exactly
    reader = _TorchFile(path)
    assert np.array_equal(reader.get("bf16"), state["bf16"].float().numpy())
    assert np.array_equal(reader.get("fp16"), state["fp16"].float().numpy())
    assert np.array_equal(reader.get("transposed"), base.t().numpy())


def test_a_model_state_dict_with_tied_weights_equals_torch_load(tmp_path):
    model = make_model(tmp_path / "hf", "gpt", seed=5)  # GPT-2 ties lm_head to wte: one storage, two names
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    assert_same_as_torch(tmp_path / "pytorch_model.bin")


def test_the_format_before_1_6_is_refused_with_what_to_do(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    torch.save({"a": torch.ones(2)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(TorchFileError, match=r"format from before 1\.6.*re-save it once.*safetensors"):
        TorchFile(path)
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(TorchFileError, match="not a PyTorch checkpoint"):
        TorchFile(path)


def _archive_with_pickle(path: Path, payload: bytes) -> None:
    """torch.save's layout around an arbitrary data.pkl."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", payload)
        archive.writestr("archive/byteorder", "little")
        archive.writestr("archive/data/0", np.ones(2, dtype="<f4").tobytes())
        archive.writestr("archive/version", "3\n")


class _System:
    """A pickle that would run a shell command when loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Smuggled:
    """A global reached through __reduce__ by way of a harmless-looking builtin."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (eval, (f"__import__('pathlib').Path({str(self.marker)!r}).touch()",))


@pytest.mark.parametrize(("payload", "refused"), [(_System, "posix.system"), (_Smuggled, "__builtin__.eval")])
def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path, payload, refused):
    marker = tmp_path / "ran"
    path = tmp_path / "hf" / "pytorch_model.bin"
    path.parent.mkdir()
    # A real state dict with the payload as one more entry, as an attacker would hide it.
    state = {"transformer.wte.weight": torch.ones(2, 2), "x": payload(marker)}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    path.write_bytes(buffer.getvalue())
    with pytest.raises(TorchFileError, match=rf"asks for {refused}.*refused, nothing was run"):
        TorchFile(path)
    assert not marker.exists()
    # through the converter's command line: a clear error, exit 2, nothing written, nothing ran
    (path.parent / "config.json").write_text(json.dumps(make_config_json("gpt")))
    done = run_without_torch("-m", "ftnative.convert", "-i", str(path.parent), "-o", str(tmp_path / "ft"),
                             "--family", "gpt", "--tp", "1", "-q")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"asks for {refused}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists()
    assert not any((tmp_path / "ft").glob("*-gpu"))


class _PidPickler(pickle.Pickler):
    """Pickles ("pid", X) as the persistent id X, as torch.save does for storages."""

    def persistent_id(self, obj):
        return obj[1] if isinstance(obj, tuple) and len(obj) == 2 and obj[0] == "pid" else None


def test_other_pickle_tricks_are_refused(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    # a bare global the reader does not know
    _archive_with_pickle(path, b"\x80\x02cbuiltins\ngetattr\nq\x00.")
    with pytest.raises(TorchFileError, match=r"builtins\.getattr"):
        TorchFile(path)
    # a persistent id that is no storage of the archive (a path outside it, no storage type)
    buffer = io.BytesIO()
    _PidPickler(buffer, protocol=2).dump({"a": ("pid", ("storage", None, "../../etc/passwd", "cpu", 2))})
    _archive_with_pickle(path, buffer.getvalue())
    with pytest.raises(TorchFileError, match="malformed storage id"):
        TorchFile(path)
    # a view past the end of its storage (as_strided would read memory beyond it)
    buffer = io.BytesIO()
    torch.save({"a": torch.ones(4)}, buffer)
    with zipfile.ZipFile(buffer) as archive:
        original = archive.read(next(n for n in archive.namelist() if n.endswith("/data.pkl")))
    tampered = original.replace(b"QK\x00K\x04\x85", b"QK\x03K\x04\x85")  # storage offset 0 -> 3
    assert tampered != original
    _archive_with_pickle(path, tampered.replace(b"K\x04tq", b"K\x02tq"))  # and the storage as _archive's: 2
    with pytest.raises(TorchFileError, match="past its storage"):
        TorchFile(path)
    # a damaged archive (a flipped bit that the CRC catches) is named as such
    torch.save({"a": torch.ones(4)}, path)
    data = bytearray(path.read_bytes())
    data[data.index(b"FloatStorage")] ^= 0x20
    path.write_bytes(bytes(data))
    with pytest.raises(TorchFileError, match="damaged archive"):
        TorchFile(path)


def make_config_json(family: str) -> dict:
    from tests.test_ftnative import tiny_config  # noqa: PLC0415

    return tiny_config(family).to_dict()


# Python that cannot import torch, as on a GPU host with only numpy.
_NO_TORCH = (
    "import sys, runpy; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
    "runpy.run_module(sys.argv[0].removeprefix('-m='), run_name='__main__', alter_sys=True)"
)


def run_without_torch(*args: str) -> subprocess.CompletedProcess:
    module, rest = args[1], args[2:]
    command = [sys.executable, "-c", _NO_TORCH, f"-m={module}", *rest]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, cwd=ROOT, capture_output=True, check=False, text=True, env=env, timeout=300)


@pytest.mark.parametrize("family", FAMILIES)
def test_bin_and_safetensors_convert_to_the_same_bytes_without_torch(tmp_path, family):
    """fp16 .bin (as KoGPT's float16 branch) for every family, LLaMA also sharded with an index."""
    make_model(tmp_path / "src", family, seed=11).half().save_pretrained(tmp_path / "st")  # safetensors, fp16
    shutil.copytree(tmp_path / "st", tmp_path / "bin")
    to_pytorch_bin(tmp_path / "bin", shards=3 if family == "llama" else 1)
    if family == "llama":
        assert (tmp_path / "bin" / "pytorch_model.bin.index.json").exists()
    for name in ("st", "bin"):
        done = run_without_torch("-m", "ftnative.convert", "-i", str(tmp_path / name), "-o",
                                 str(tmp_path / f"{name}-ft"), "--family", family, "--tp", "2",
                                 "--weight-dtype", "fp32" if family == "gptj" else "fp16",  # GPT-J: fp32 only
                                 "--workers", "2", "-q")  # fmt: skip
        assert done.returncode == 0, done.stderr
    st, binary = tmp_path / "st-ft" / "2-gpu", tmp_path / "bin-ft" / "2-gpu"
    files = sorted(p.name for p in st.glob("*.bin"))
    assert files
    assert files == sorted(p.name for p in binary.glob("*.bin"))
    _, mismatch, errors = filecmp.cmpfiles(st, binary, files, shallow=False)
    assert mismatch == []
    assert errors == []


def test_a_missing_shard_of_the_index_is_named(tmp_path):
    make_model(tmp_path / "bin", "llama", seed=2)
    to_pytorch_bin(tmp_path / "bin", shards=3)
    next((tmp_path / "bin").glob("pytorch_model-00002-*.bin")).unlink()
    with pytest.raises(CheckpointError, match=r"the index names pytorch_model-00002-of-\d+\.bin, which is missing"):
        Checkpoint(tmp_path / "bin")
