"""The lab end to end: `make lab` from the project root, as a newcomer types it.

It brings up the lab (or converges it when it is up), and must print a completion through the
ensemble over HTTP on 127.0.0.1 equal to what transformers' generate() makes of the same model
and prompt; a second `make lab` must change nothing and take under two minutes; `make lab-down`
must remove what the lab created; in between, check mode previews a GPU change on one host
(the conversion it would make, the config.pbtxt and unit diffs) without changing it. Tears down
a lab that was already running."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from conftest import BIN, ROOT, run_playbook

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.lab
SOURCES = Path("/var/tmp/ftfleet-lab")
PROMPT = "The model repository"
TOKENS = 16


def make(target: str, timeout: int) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0", "FTFLEET_LAB_PROMPT": PROMPT}  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(["make", target], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)  # fmt: skip
    return done, time.monotonic() - started


def recap(out: str) -> dict[str, dict[str, int]]:
    hosts = {}
    for host, counts in re.findall(r"^(lab-node\d)\s+:\s+(.*)$", out, re.MULTILINE):
        hosts[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return hosts


def completion(out: str) -> str:
    """The line `make lab` prints after its 'completion through the ensemble' heading."""
    lines = out.splitlines()
    heading = max(i for i, line in enumerate(lines) if "completion through the ensemble" in line)
    return lines[heading + 1]


def reference(tmp_path: Path) -> str:
    checkout = tmp_path / "tiny-gpt2"
    env = {**os.environ, "HOME": str(tmp_path)}
    subprocess.run(["git", "clone", "-q", f"file://{SOURCES}/tiny-gpt2.git", str(checkout)], env=env, check=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkout)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkout).eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    ids = tokenizer.encode(PROMPT)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=TOKENS, do_sample=False,
                             pad_token_id=tokenizer.eos_token_id)[0].tolist()  # fmt: skip
    return tokenizer.decode(out)


def test_make_lab_serves_what_transformers_generates_then_changes_nothing(tmp_path):
    try:
        first, took = make("lab", timeout=1800)
        out = first.stdout + first.stderr
        assert first.returncode == 0, out[-6000:]
        assert took < 15 * 60, f"make lab took {took:.0f} s"
        hosts = recap(out)
        assert set(hosts) == {"lab-node1", "lab-node2"}, out[-3000:]
        assert all(h["failed"] == 0 and h["unreachable"] == 0 for h in hosts.values()), hosts
        # The GPU-only roles say that they skip.
        for role in ("nvidia_driver", "nvidia_container_toolkit", "ft_gemm_tune"):
            assert re.search(rf"{role}: lab-node1 has no", out), f"{role} did not announce its skip"
        served = completion(out)
        assert served == reference(tmp_path), out[-3000:]
        assert served.startswith(PROMPT)

        second, took = make("lab", timeout=900)
        out = second.stdout + second.stderr
        assert second.returncode == 0, out[-6000:]
        hosts = recap(out)
        assert hosts, out[-6000:]
        assert all(h["changed"] == 0 for h in hosts.values()), (hosts, out[-6000:])
        assert completion(out) == served
        assert took < 120, f"the second make lab took {took:.0f} s"

        # Check mode previews a GPU change on one host, changes nothing, and the gate still runs.
        preview = run_playbook("site.yml", "--check", "--diff", "--limit", "lab-node1",
                               "-e", '{"fleet_gpu_devices": [0, 1]}')  # fmt: skip
        out = preview.stdout + preview.stderr
        assert preview.returncode == 0, out[-6000:]
        assert "fastertransformer/1/2-gpu would be converted" in " ".join(out.split())
        assert '+parameters { key: "tensor_para_size" value: { string_value: "2" } }' in out
        assert "+    --label=ftfleet.gpus=0,1" in out
        assert "lab-node1 answers" in out
        served_config = "/srv/ftfleet/models/tiny-gpt2/fastertransformer/config.pbtxt"
        grep = ["docker", "exec", "lab-node1", "grep", "-c", '/fastertransformer/1/1-gpu"', served_config]
        still = subprocess.run(grep, capture_output=True, text=True, check=False)
        assert still.stdout.strip() == "1", "check mode changed the served config.pbtxt"
    finally:
        down, _ = make("lab-down", timeout=600)
    assert down.returncode == 0, down.stdout + down.stderr
    left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=ftfleet.lab=true"], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    assert not left.strip(), f"make lab-down left containers: {left}"
    assert not SOURCES.exists()
