"""The Hugging Face token reaches git and nothing else: not the output of a -vvv run, not the
process list, not the data root, not the journal.

A git server over smart HTTP that wants the token (tests/fixtures/git-http-server, a stand-in for
a gated model on the Hub) runs on the loopback of the controller and of a systemd host (a
container). preflight reads config.json on the controller and model_checkpoint fetches the model
on the host, both with the token, at -vvv. A stand-in git first on PATH
(tests/fixtures/git-snapshot/git) records every process's command line each time git runs, and
the hash of the HTTP header git was given."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BIN, ROOT, run_playbook

sys.path.insert(0, str(ROOT / "tests" / "unit"))
from configs import GPT2

pytestmark = pytest.mark.docker
HOST = "ftfleet-token-host"
TOKEN = "hf_TOKENtestNEVERtoLEAK9f8e7d6c5b4a"
API_KEY = "ftf-api-key-NEVERtoLEAK-0123456789"
HEADER_SHA = hashlib.sha256(f"Authorization: Bearer {TOKEN}\n".encode()).hexdigest()
FIXTURES = ROOT / "tests" / "fixtures"


def sh(*argv: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)


def in_host(command: str) -> subprocess.CompletedProcess[str]:
    return sh("docker", "exec", HOST, "bash", "-c", command)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def world():
    """Sources under /var/tmp (mounted at the same path in the host), servers, the host."""
    root = Path(f"/var/tmp/ftfleet-token-test-{os.getpid()}")
    shutil.rmtree(root, ignore_errors=True)
    (root / "work").mkdir(parents=True)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(root), "PATH": "/usr/bin:/bin"}  # fmt: skip
    (root / "work" / "config.json").write_text(json.dumps(GPT2))
    # weights for preflight's file list (a plain file, no LFS object: this test is about the token)
    (root / "work" / "model.safetensors").write_bytes(b"\x00" * 8)
    for argv in (["git", "init", "-q", "-b", "main"], ["git", "add", "."], ["git", "commit", "-qm", "gated model"]):
        subprocess.run(argv, cwd=root / "work", env=env, check=True)
    subprocess.run(["git", "clone", "-q", "--bare", "work", "srv/model.git"], cwd=root, env=env, check=True)
    (root / "token").write_text(TOKEN)
    (root / "token").chmod(0o600)
    shutil.copy(FIXTURES / "git-http-server", root / "git-http-server")
    port = free_port()
    server = subprocess.Popen([sys.executable, str(root / "git-http-server"), str(root / "srv"), str(port),
                               str(root / "token"), str(root / "controller-server.log")])  # fmt: skip
    platforms = json.dumps({"molecule_yml": {"platforms": [{"name": HOST, "volumes": [f"{root}:{root}:ro"]}]}})
    try:
        created = run_playbook("molecule/resources/create.yml", "-e", platforms)
        assert created.returncode == 0, created.stdout[-3000:]
        apt = in_host("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git git-lfs")
        assert apt.returncode == 0, apt.stderr[-2000:]
        assert sh("docker", "cp", str(FIXTURES / "git-snapshot" / "git"), f"{HOST}:/usr/local/bin/git").returncode == 0
        started = sh("docker", "exec", "-d", HOST, "python3", f"{root}/git-http-server", f"{root}/srv", str(port),
                     f"{root}/token", "/var/tmp/host-server.log")  # fmt: skip
        assert started.returncode == 0, started.stderr
        yield {"root": root, "url": f"http://127.0.0.1:{port}/model.git"}
    finally:
        server.kill()
        run_playbook("molecule/resources/destroy.yml", "-e", platforms)
        shutil.rmtree(root, ignore_errors=True)


def test_the_token_reaches_git_and_appears_nowhere_else(world, tmp_path):
    root = world["root"]
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  hosts:\n    {HOST}:\n      ansible_connection: community.docker.docker\n")
    play = tmp_path / "fetch.yml"
    play.write_text("- hosts: all\n  roles: [preflight, model_checkpoint]\n")
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({
        "fleet_model": {"name": "gated", "family": "gpt",
                        "source": {"url": world["url"], "revision": "main", "token_required": True}},
        "fleet_hf_token": TOKEN, "fleet_require_gpus": False, "fleet_data_root": "/srv/ftfleet",
        "preflight_config_cache": str(tmp_path / "cache"),
        # the serving front's API keys are secrets of the same kind: checked by preflight, never shown
        "fleet_api_keys": [{"name": "token-test", "key": API_KEY}],
    }))  # fmt: skip
    snapshots = tmp_path / "controller-snapshots.log"
    path = f"{FIXTURES / 'git-snapshot'}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}"
    # The play lives outside the project: the fleet defaults come in as extra vars.
    fleet = ROOT / "group_vars" / "all" / "fleet.yml"
    result = run_playbook(play, "-i", inventory, "-e", f"@{fleet}", "-e", f"@{extra}", "-vvv", PATH=path,
                          FTFLEET_GIT_SNAPSHOTS=str(snapshots))  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    assert "EXEC" in out  # -vvv: every command Ansible ran is in the output
    assert TOKEN not in out
    assert API_KEY not in out

    # git got the header, from the controller and from the host, and the servers let it in.
    controller = snapshots.read_text()
    host = in_host("cat /var/tmp/ftfleet-git-snapshots.log").stdout
    for where, log in (("controller", controller), ("host", host)):
        assert "== git clone" in log or "== git fetch" in log, f"{where}: git never ran:\n{log[:2000]}"
        assert f"header-sha256 {HEADER_SHA}" in log, f"{where}: git ran without the token's header"
        assert TOKEN not in log, f"{where}: the token is in the process list while git runs"
    assert "fetch-model-config" in controller  # the snapshots saw the scripts that handed it over
    assert "fetch-checkpoint" in host
    served = (root / "controller-server.log").read_text() + in_host("cat /var/tmp/host-server.log").stdout
    assert "allowed POST /model.git/git-upload-pack" in served
    assert "denied" not in served, served

    # The checkout is there; the token is not: data root, temporary directories, the journal.
    assert in_host("git -C /srv/ftfleet/checkpoints/gated cat-file -e HEAD:config.json").returncode == 0
    for place in ("/srv/ftfleet", "/tmp", "/var/tmp", "/root", "/run"):  # (less the stand-in Hub's own copy)
        found = in_host(f"grep -rlF --exclude-dir={root.name} -- {TOKEN} {place}")
        assert not found.stdout.strip(), f"the token is in {found.stdout}"
    journal = in_host("journalctl --no-pager -o cat")
    assert "Invoked with" in journal.stdout  # Ansible logs its module calls there
    assert TOKEN not in journal.stdout
    assert not sh("grep", "-rlF", "--", TOKEN, str(tmp_path / "cache")).stdout
