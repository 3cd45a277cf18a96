"""A real tritonserver on this machine (the binary of the nvidia-pytriton wheel) serving a model
repository that the triton_model_repo role wrote, with the CPU stand-in (ftnative/triton_model.py)
as the `fastertransformer` backend: for the repository test and the gateway's tests."""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT, run_playbook


def server_errors(log: Path) -> str:
    """What tritonserver said went wrong (error lines, models not loaded), then its last lines."""
    lines = log.read_text().splitlines()
    errors = [line for line in lines if line.startswith("E") or "UNAVAILABLE" in line or "Traceback" in line]
    return "\n".join([*errors[-20:], "...", *lines[-15:]])


def free_ports(count: int) -> list[int]:
    """`count` different free ports on 127.0.0.1: each socket stays bound until all are chosen (one
    at a time, the kernel may hand out the same port again: tritonserver then refused to start with
    its HTTP and gRPC ports equal, a CI run's failure)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def free_port() -> int:
    return free_ports(1)[0]


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


def venv_home(venv: Path) -> Path:
    """The directory of a virtualenv's base interpreter, from its pyvenv.cfg."""
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return Path(value.strip())
    raise ValueError(f"{venv}/pyvenv.cfg names no home")


def venv_version(venv: Path) -> str:
    """A virtualenv's Python as major.minor, from its pyvenv.cfg."""
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("version", "version_info"):
            return ".".join(value.strip().split(".")[:2])
    raise ValueError(f"{venv}/pyvenv.cfg names no version")


@dataclass
class Server:
    http: int
    grpc: int
    metrics: int
    log: Path
    process: subprocess.Popen | None = None


# What the lab's serving image sets for the CPU stand-in besides its paths (lab/tritonserver-cpu.Dockerfile):
# numpy's OpenBLAS on one thread, not a spinning worker per core.
STAND_IN_ENV = {"OPENBLAS_NUM_THREADS": "1"}


def stub_python(work: Path, python: Path | None) -> tuple[Path, str]:
    """The Python the backend's stub embeds, made in work/stub-python as a serving image has it:
    a virtualenv of the system python3 (or of `python`'s base interpreter), whose site-packages
    holds one .pth file naming this checkout (ftnative, for the stand-in) and the packages (this
    virtualenv's, with transformers for the tokenizing models; or `python`'s own). The stub's
    interpreter is isolated (PyConfig_InitIsolatedConfig: PYTHONPATH is ignored) but reads .pth
    files in its site-packages, so the models import with no path of their own.
    Returns (the virtualenv, its major.minor)."""
    import transformers  # noqa: PLC0415 - heavy; only the tests that serve a model load it

    base, packages = Path("/usr/bin/python3"), Path(transformers.__file__).parents[1]
    if python is not None:
        base = venv_home(python) / "python3"
        packages = Path(next((python / "lib").glob("python3.*/site-packages")))
    stub = work / "stub-python"
    if not (stub / "pyvenv.cfg").is_file():
        subprocess.run([str(base), "-m", "venv", "--without-pip", str(stub)], check=True)
    site = next((stub / "lib").glob("python3.*/site-packages"))
    (site / "ftfleet-tests.pth").write_text(f"{ROOT}\n{packages}\n")
    return stub, venv_version(stub)


@contextlib.contextmanager
def tritonserver(repo: Path, work: Path, python: Path | None = None,
                 env: dict[str, str] | None = None, ports: Server | None = None) -> Iterator[Server]:  # fmt: skip
    """Start tritonserver on 127.0.0.1 with `repo`, wait until ready, stop it afterwards.

    The Python backend runs on this machine's system python3 with this virtualenv's packages, or
    on `python`: a virtualenv of another Python (the serving images' 3.8 or 3.10) with its own,
    whose stub the wheel ships, whose libpython comes from its base interpreter (stub_python).
    `env`: more of tritonserver's environment (the stand-in's FTNATIVE_STEP_SECONDS); `ports`:
    those of an earlier server (a restart, as its unit's), else free ones."""
    import pytriton  # noqa: PLC0415

    server = Path(pytriton.__file__).parent / "tritonserver"
    site = Path(pytriton.__file__).parents[1]
    stub, version = stub_python(work, python)
    backends = work / "backends"
    if not backends.exists():
        shutil.copytree(server / "backends", backends)
        shutil.copy(server / "python_backend_stubs" / version / "triton_python_backend_stub", backends / "python")
        (backends / "fastertransformer").mkdir()
        shutil.copy(ROOT / "ftnative" / "triton_model.py", backends / "fastertransformer" / "model.py")
    ports = Server(*((ports.http, ports.grpc, ports.metrics) if ports else free_ports(3)),
                   work / "tritonserver.log")  # fmt: skip
    # The stub takes its prefix from the python3 on PATH (the virtualenv's, whose pyvenv.cfg
    # names its base) and links its base interpreter's libpython.
    libs = [str(site / "nvidia_pytriton.libs"), str(venv_home(stub).parent / "lib")]
    path = f"{stub / 'bin'}:/usr/bin:/bin"
    env = {**os.environ, **STAND_IN_ENV, **(env or {}), "PATH": path, "LD_LIBRARY_PATH": ":".join(libs)}
    with ports.log.open("w") as log:
        proc = subprocess.Popen(
            [str(server / "bin" / "tritonserver"), f"--model-repository={repo}", f"--backend-directory={backends}",
             "--http-address=127.0.0.1", f"--http-port={ports.http}", "--grpc-address=127.0.0.1",
             f"--grpc-port={ports.grpc}", f"--metrics-port={ports.metrics}", "--allow-metrics=false"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        ports.process = proc
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
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            # Its Python backend stubs outlive a tritonserver that a test killed (SIGKILL): they
            # were left running after every such test. (A process group of its own would do it,
            # but then a stopped test run would leave the server itself running.)
            for pid in backend_stubs(backends, proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait(timeout=30)


def backend_stubs(backends: Path, server_pid: int) -> list[int]:
    """The Python backend stubs that the tritonserver `server_pid` started from `backends`: each
    stub's command line is its program under backends/python and, among its arguments, the pid of
    the server that started it (which it keeps when the server dies and it is adopted)."""
    stub, found = str(backends / "python" / "triton_python_backend_stub").encode(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if argv[0] == stub and str(server_pid).encode() in argv[1:]:
            found.append(int(entry.name))
    return found


PYENV = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"


def other_python(version: str) -> Path:
    """The interpreter of Python `version` (major.minor) from pyenv; where it is missing the test
    fails in CI (CI=true: the machines that test this project have 3.8 to 3.13) and skips
    elsewhere, saying why."""
    import pytest  # noqa: PLC0415

    found = sorted(PYENV.glob(f"{version}.*/bin/python{version}"))
    if not found:
        reason = f"no Python {version} under {PYENV} (pyenv): the test of code that runs on {version} cannot run"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return found[-1]


def python_env(version: str, requirements: list[str], *pip_args: str, left_out: tuple[str, ...] = ()) -> Path:
    """A virtualenv of Python `version` with `requirements` installed from the package index (pip's
    choice for that Python, with `pip_args`), kept under .cache/pythons/ by its inputs and made
    again only when they change; `pip check` must find the closure whole, but for the packages
    `left_out` on purpose."""
    import hashlib  # noqa: PLC0415

    inputs = json.dumps([version, requirements, pip_args])
    venv = ROOT / ".cache" / "pythons" / f"{version}-{hashlib.sha256(inputs.encode()).hexdigest()[:12]}"
    if (venv / ".ready").is_file():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([str(other_python(version)), "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    # --no-compile: a test imports a small part of what it installs (transformers alone is
    # thousands of modules); byte-compiling all of it took more than half of pip's CPU time.
    install = [*pip, "install", "--no-compile", *pip_args, *requirements]
    done = subprocess.run(install, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"pip on Python {version}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    check = subprocess.run([*pip[:-1], "check"], capture_output=True, text=True, check=False)
    expected = tuple(f"requires {name}, which is not installed." for name in left_out)
    missing = [line for line in check.stdout.splitlines() if check.returncode and not line.endswith(expected)]
    assert not missing, f"pip check on Python {version}: {check.stdout}"
    assert not check.stderr, f"pip check on Python {version}: {check.stderr}"
    (venv / ".ready").write_text(inputs)
    return venv


def installed(venv: Path, *names: str) -> dict[str, str]:
    """The versions of `names` in a virtualenv (what pip gave that Python), for the test's output."""
    script = "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", script, *names], capture_output=True, text=True,
                         check=True)  # fmt: skip
    return json.loads(out.stdout)


def start_gateway(settings: dict, work: Path, *tls: str, python: Path | None = None, app: Path | None = None,
                  port: int | None = None) -> tuple[subprocess.Popen, str, Path]:  # fmt: skip
    """`python -m ftgateway` on `port` (or a free one) of 127.0.0.1 (HTTPS with tls = (certfile, keyfile)),
    with this project's python and sources, or with `python` and the packed `app` zip on
    PYTHONPATH as the unit runs it on a host. Returns the process, its URL and its log; waits
    until it answers (not until tritonserver is ready)."""
    import httpx  # noqa: PLC0415

    port = port or free_port()
    config = work / f"gateway-{port}.json"
    config.write_text(json.dumps(settings))
    log = work / f"gateway-{port}.log"
    extra = ["--ssl-certfile", tls[0], "--ssl-keyfile", tls[1]] if tls else []
    env = {**os.environ, "PYTHONPATH": str(app)} if app else None
    proc = subprocess.Popen([str(python or sys.executable), "-m", "ftgateway", "--config", str(config), "--port",
                             str(port), *extra], cwd=ROOT if app is None else work, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)  # fmt: skip
    url, deadline = f"{'https' if tls else 'http'}://127.0.0.1:{port}", time.monotonic() + 60
    while True:
        try:
            httpx.get(url + "/metrics", timeout=2, verify=tls[0] if tls else True)
            return proc, url, log
        except httpx.TransportError:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"the gateway did not start: {log.read_text()}"
            time.sleep(0.3)


REPOSITORY_PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: triton_model_repo
      vars:
        fleet_model: {{name: {name}, family: gpt, source: {{url: "file:///x", revision: main}}, data_type: fp32}}
        triton_model_repo_dir: "{repo}"
        triton_model_repo_container_dir: "{repo}"
        triton_model_repo_container_tokenizer_dir: "{checkpoint}"
        triton_model_repo_decoupled: {decoupled}
"""


def gpt_repository(work: Path, checkpoint: Path, *, tp: int, decoupled: bool, name: str = "tiny",
                   revision: str = "", extra: dict | None = None) -> Path:  # fmt: skip
    """work/repo: the gpt family's model repository as triton_model_repo writes it (the tokenizer
    from `checkpoint`; the fastertransformer config naming `revision`, as after ft_convert's plan;
    `extra`: more of the role's variables) and the checkpoint converted there for `tp`."""
    from ftnative.convert import convert  # noqa: PLC0415 - heavy; only the tests that serve a model load it

    repo = work / "repo"
    play = REPOSITORY_PLAY.format(name=name, repo=repo, checkpoint=checkpoint, decoupled=str(decoupled).lower())
    (work / "play.yml").write_text(play)
    done = run_playbook(work / "play.yml", "-i", "localhost,", "-e", f"fleet_tensor_para_size={tp}",
                        "-e", f"ansible_python_interpreter={sys.executable}",
                        *(["-e", f"ft_convert_revision={revision}"] if revision else []),
                        *(["-e", json.dumps(extra)] if extra else []))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    convert(checkpoint, repo / "fastertransformer" / "1", "gpt", tp, "fp32", log=lambda _m: None)
    return repo
