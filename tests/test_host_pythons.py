"""What the roles run on the hosts, on every Python a supported host OS has (docs/testing.md,
"Where each file runs"): RHEL 9's 3.9, Ubuntu 22.04's 3.10, Debian 12's 3.11, Ubuntu 24.04's 3.12.

For each: the gateway's and the registry's pinned requirements install from the package index
(--no-deps, as the roles install them, and `pip check` finds the closure whole); the gateway, as
the role runs it (the packed zip on PYTHONPATH), serves a real tritonserver: a greedy completion
equal to transformers', the same text streamed token by token, a chat answer, an expired key's
401; the converter (the packed tools zip, as ft_convert runs it) writes the same bytes as on the
controller; the gpus fact reads a recorded nvidia-smi as on the controller; the status script
reads the tritonserver's health."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from tritonlocal import gpt_repository, greedy_completion, python_env, start_gateway, tiny_model, tritonserver

transformers = pytest.importorskip("transformers")
httpx = pytest.importorskip("httpx")
pytest.importorskip("pytriton")
from ftgateway.config import hash_key  # noqa: E402

HOST_PYTHONS = ("3.9", "3.10", "3.11", "3.12")  # RHEL 9, Ubuntu 22.04, Debian 12, Ubuntu 24.04
REQUIREMENTS = ("roles/gateway/files/requirements.txt", "roles/ft_convert/files/registry-requirements.txt")
KEY, OLD_KEY = "ftf-host-key", "ftf-host-key-expired"
PROMPT = "Ansible automation that takes bare GPU hosts"


def pinned() -> list[str]:
    """Every pin of the hosts' requirement files, once (both pin the packages they share alike)."""
    lines = []
    for name in REQUIREMENTS:
        lines += [line for line in (ROOT / name).read_text().splitlines() if line and not line.startswith("#")]
    return sorted(set(lines))


def left_out() -> tuple[str, ...]:
    """What the requirement files leave out on purpose (`#! leave-out NAME` in their .in files)."""
    names = []
    for name in REQUIREMENTS:
        source = (ROOT / name).with_suffix(".in").read_text().splitlines()
        names += [line.split()[-1] for line in source if line.startswith("#! leave-out")]
    return tuple(names)


def packed(tmp: Path, script: str) -> Path:
    """What a role copies to a host: the zip its pack script builds on the controller."""
    out = tmp / f"{script}.zip"
    role = "gateway" if script == "pack-app" else "ft_convert"
    subprocess.run([sys.executable, str(ROOT / "roles" / role / "files" / script), str(ROOT), str(out)], check=True,
                   capture_output=True)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A tiny GPT-2-shaped model behind a real tritonserver (decoupled: token streaming), its
    greedy reference, its tp-2 shards as the controller converts them, and the packed zips."""
    work = tmp_path_factory.mktemp("hosts")
    checkpoint = work / "checkpoint"
    tiny_model("gpt", checkpoint)
    repo = gpt_repository(work, checkpoint, tp=2, decoupled=True)
    keys = [{"name": "host", "sha256": hash_key(KEY)},
            {"name": "old", "sha256": hash_key(OLD_KEY), "expires": "2020-01-01T00:00:00+00:00"}]  # fmt: skip
    (work / "keys.json").write_text(json.dumps({"keys": keys}))
    with tritonserver(repo, work) as server:
        yield {
            "work": work,
            "checkpoint": checkpoint,
            "grpc": f"127.0.0.1:{server.grpc}",
            "http": server.http,
            "metrics": server.metrics,
            "reference": greedy_completion(checkpoint, PROMPT, 12)[len(PROMPT) :],
            "shards": repo / "fastertransformer" / "1" / "2-gpu",
            "app": packed(work, "pack-app"),
            "tools": packed(work, "pack-tools"),
        }


def digests(directory: Path) -> dict[str, str]:
    """Each file's SHA-256; conversion.json's record without its timing (seconds)."""
    out = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}
    record = json.loads((directory / "conversion.json").read_text())
    out["conversion.json"] = {k: v for k, v in record.items() if k != "seconds"}
    return out


def healthy(url: str, proc: subprocess.Popen, log: Path) -> None:
    """Wait until /healthz says ready (tritonserver's models answer, the tokenizer checked)."""
    deadline = time.monotonic() + 60
    while httpx.get(url + "/healthz", timeout=10).status_code != 200:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"the gateway did not become healthy: {log.read_text()}"
        time.sleep(0.3)


@pytest.mark.parametrize("version", HOST_PYTHONS)
def test_the_hosts_code_runs_on_the_hosts_python(served, version):
    venv = python_env(version, pinned(), "--no-deps", "--only-binary=:all:", left_out=left_out())
    python = venv / "bin" / "python"

    # The converter, as ft_convert runs it: the same bytes as on the controller.
    out = served["work"] / f"convert-{version}"
    env = {**os.environ, "PYTHONPATH": str(served["tools"])}
    done = subprocess.run([str(python), "-m", "ftnative.convert", "-i", str(served["checkpoint"]), "-o", str(out),
                           "--family", "gpt", "--tp", "2", "-q"], env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert digests(out / "2-gpu") == digests(served["shards"])
    imported = subprocess.run([str(python), "-c", "import ftnative.artifact, ftnative.verify"], env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
    assert imported.returncode == 0, imported.stderr  # the registry's ORAS SDK imports there too

    # The gpus fact (gpu_facts runs it with the host's python3).
    fact = ROOT / "roles" / "gpu_facts" / "files" / "gpus.fact"
    facts_d = served["work"] / f"facts-{version}"
    facts_d.mkdir()
    (facts_d / "gpus.fact").write_text(fact.read_text())
    smi = ROOT / "tests" / "fixtures" / "gpus" / "mixed8" / "nvidia-smi"
    (facts_d / "gpus.json").write_text(json.dumps({"nvidia_smi": str(smi), "sysfs": str(facts_d)}))
    here, there = ([p, str(facts_d / "gpus.fact")] for p in (sys.executable, str(python)))
    assert json.loads(subprocess.run(there, capture_output=True, text=True, check=True).stdout) == json.loads(
        subprocess.run(here, capture_output=True, text=True, check=True).stdout
    )

    # The status script (ftfleet status runs it on each host) against the same tritonserver.
    status = subprocess.run([str(python), str(ROOT / "roles" / "fleet_status" / "files" / "fleet-status"), "tiny",
                             str(served["checkpoint"]), str(served["work"] / "no-image-record"), str(served["http"]),
                             str(served["metrics"]), "0"], capture_output=True, text=True, check=False)  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["health"] == "ready", status.stdout

    # The gateway, as its unit runs it.
    settings = {"model": "tiny", "triton_grpc": served["grpc"], "context_length": 128, "max_tokens_limit": 64,
                "max_request_bytes": 4096, "keys_file": str(served["work"] / "keys.json"),
                "tokenizer_dir": str(served["checkpoint"]), "checkpoint_dir": str(served["checkpoint"]),
                "chat_template": "{% for m in messages %}{{ m.content }}\n{% endfor %}"}  # fmt: skip
    proc, url, log = start_gateway(settings, served["work"], python=python, app=served["app"])
    try:
        healthy(url, proc, log)
        auth = {"Authorization": f"Bearer {KEY}"}
        body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 12, "temperature": 0}
        whole = httpx.post(url + "/v1/completions", json=body, headers=auth, timeout=60)
        assert whole.status_code == 200, whole.text
        assert whole.json()["choices"][0]["text"] == served["reference"]
        with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, headers=auth,
                          timeout=60) as answer:  # fmt: skip
            events = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: {")]
        assert len(events) > 2  # token by token
        assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == served["reference"]
        chat = httpx.post(
            url + "/v1/chat/completions",
            headers=auth,
            timeout=60,
            json={"model": "tiny", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4},
        )
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["role"] == "assistant"
        expired = httpx.post(url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {OLD_KEY}"},
                             timeout=60)  # fmt: skip
        assert expired.status_code == 401, expired.text
        assert expired.json()["error"]["code"] == "expired_api_key"
        assert "tokenizer in the gateway: on" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
