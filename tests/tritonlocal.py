"""A real tritonserver on this machine (the binary of the nvidia-pytriton wheel) serving a model
repository that the triton_model_repo role wrote, with the CPU stand-in (ftnative/triton_model.py)
as the `fastertransformer` backend: for the repository test and the gateway's tests."""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT


def server_errors(log: Path) -> str:
    """What tritonserver said went wrong (error lines, models not loaded), then its last lines."""
    lines = log.read_text().splitlines()
    errors = [line for line in lines if line.startswith("E") or "UNAVAILABLE" in line or "Traceback" in line]
    return "\n".join([*errors[-20:], "...", *lines[-15:]])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tiny_model_module():
    """scripts/make-tiny-model as a module: its configuration of each family."""
    loader = importlib.machinery.SourceFileLoader("make_tiny_model", str(ROOT / "scripts" / "make-tiny-model"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def tiny_model(family: str, checkpoint: Path):
    """A tokenizer trained on local text and a tiny random model of the family of its vocabulary."""
    import tokenizers  # noqa: PLC0415 - heavy; only the tests that serve a model load them
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    corpus = ROOT / "tests" / "fixtures" / "tokenizer-corpus"  # frozen: doc edits do not change the models
    texts = [(corpus / name).read_text() for name in ("README.md", "filters.md", "images.md")]
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=400, min_frequency=2, special_tokens=["<|endoftext|>"])
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>",
                                                     bos_token="<|endoftext|>")  # fmt: skip
    tokenizer.save_pretrained(checkpoint)
    torch.manual_seed(0)
    config = make_tiny_model_module().config_for(family, transformers, len(tokenizer), tokenizer.eos_token_id, (2, 4))
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(checkpoint)
    return tokenizer, model


def greedy_completion(checkpoint: Path, prompt: str, tokens: int) -> str:
    """transformers' greedy generate() on a saved checkpoint: the prompt and what follows it."""
    import torch  # noqa: PLC0415 - heavy; only the tests that compare with transformers load them
    import transformers  # noqa: PLC0415

    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    ids = tokenizer.encode(prompt)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=tokens, do_sample=False,
                             pad_token_id=tokenizer.eos_token_id)[0].tolist()  # fmt: skip
    return tokenizer.decode(out)


@dataclass
class Server:
    http: int
    grpc: int
    metrics: int
    log: Path


@contextlib.contextmanager
def tritonserver(repo: Path, work: Path) -> Iterator[Server]:
    """Start tritonserver on 127.0.0.1 with `repo`, wait until ready, stop it afterwards."""
    import pytriton  # noqa: PLC0415

    server = Path(pytriton.__file__).parent / "tritonserver"
    site = Path(pytriton.__file__).parents[1]
    backends = work / "backends"
    if not backends.exists():
        shutil.copytree(server / "backends", backends)
        py = f"{sys.version_info.major}.{sys.version_info.minor}"
        shutil.copy(server / "python_backend_stubs" / py / "triton_python_backend_stub", backends / "python")
        (backends / "fastertransformer").mkdir()
        shutil.copy(ROOT / "ftnative" / "triton_model.py", backends / "fastertransformer" / "model.py")
    ports = Server(free_port(), free_port(), free_port(), work / "tritonserver.log")
    # The stub embeds the system libpython and takes its prefix from the python3 on PATH: keep
    # the system one first, not a virtualenv (whose stdlib may come from another 3.11 build).
    env = {**os.environ, "PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(site / "nvidia_pytriton.libs")}
    with ports.log.open("w") as log:
        proc = subprocess.Popen(
            [str(server / "bin" / "tritonserver"), f"--model-repository={repo}", f"--backend-directory={backends}",
             "--http-address=127.0.0.1", f"--http-port={ports.http}", "--grpc-address=127.0.0.1",
             f"--grpc-port={ports.grpc}", f"--metrics-port={ports.metrics}", "--allow-metrics=false"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while True:
                ready = f"http://127.0.0.1:{ports.http}/v2/health/ready"
                with contextlib.suppress(OSError):
                    if urllib.request.urlopen(ready, timeout=2).status == 200:
                        break
                assert proc.poll() is None, server_errors(ports.log)
                assert time.monotonic() < deadline, server_errors(ports.log)
                time.sleep(1)
            yield ports
        finally:
            proc.terminate()
            proc.wait(timeout=30)
