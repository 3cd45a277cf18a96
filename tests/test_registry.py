"""A fleet that shares a registry builds each image once: a real Docker Distribution (Debian's
docker-registry) with TLS from a test CA and basic auth, and a second one on plain HTTP; three
hosts with Docker inside, two of which need the same FT image. Builds, pushes and pulls are
counted from the runs' ansible-runner events (ftfleet's own event model), never from text.
Then the faults: the registry down, a corrupted blob."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import ansible_runner
import pytest
from conftest import BIN, ROOT, run_playbook

from ftfleet.events import Run, Step

pytestmark = pytest.mark.docker
FIXTURE = ROOT / "tests" / "fixtures" / "registry"
SHARED = Path("/tmp/ftfleet-registry-test")  # the relays' sockets, the CA; platforms.yml mounts it
HOSTS = ("ftfleet-reg-a", "ftfleet-reg-b", "ftfleet-reg-c")
PLAIN = ["-e", "fleet_registry=registry.ftfleet.test:5001/ftfleet", "-e", '{"fleet_registry_insecure": true}',
         "-e", "fleet_registry_username=", "-e", "fleet_registry_password=",
         "-e", "fleet_registry_ca_certificate="]  # fmt: skip
STEPS = {"build": "build | Start the build", "push": "push | Push", "pull": "pull | Pull"}


def sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)


def in_host(host: str, command: str) -> subprocess.CompletedProcess[str]:
    return sh("docker", "exec", host, "bash", "-c", command)


@pytest.fixture(scope="module")
def fleet():
    shutil.rmtree(SHARED, ignore_errors=True)
    SHARED.mkdir(parents=True)
    platforms = f"@{FIXTURE / 'platforms.yml'}"
    try:
        created = run_playbook("molecule/resources/create.yml", "-e", platforms)
        assert created.returncode == 0, created.stdout[-3000:]
        prepared = run_playbook("-i", FIXTURE / "inventory.yml", FIXTURE / "prepare.yml")
        assert prepared.returncode == 0, prepared.stdout[-5000:]
        yield
    finally:
        run_playbook("molecule/resources/destroy.yml", "-e", platforms)
        shutil.rmtree(SHARED, ignore_errors=True)


def converge(work: Path, *cmdline: str) -> tuple[Run, str]:
    """The image roles on the three hosts through ansible-runner; the events fill a Run."""
    run = Run(stages={})
    work.mkdir(parents=True, exist_ok=True)
    runner = ansible_runner.run(
        private_data_dir=str(work), project_dir=str(ROOT), playbook=str(FIXTURE / "converge.yml"),
        inventory=str(FIXTURE / "inventory.yml"), cmdline=shlex.join(cmdline), quiet=True, event_handler=run.handle,
        envvars={"ANSIBLE_NOCOLOR": "1", "PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin"},
    )  # fmt: skip
    if runner.status != "successful" and not run.failures:  # Ansible itself refused: keep its words
        run.failures.append(Step(host="-", stage="", role="", task="ansible-playbook", duration=0.0, handler=False,
                                 message=runner.stdout.read()[-3000:]))  # fmt: skip
    return run, runner.status


def steps(run: Run) -> dict[str, Counter]:
    """build/push/pull -> Counter of hosts that did it (changed tasks only)."""
    counts = {kind: Counter() for kind in STEPS}
    for step in run.changes:
        for kind, prefix in STEPS.items():
            if step.task.startswith(prefix):
                counts[kind][step.host] += 1
    return counts


def image_ids(host: str) -> dict[str, str]:
    """ref -> image id of the images ftfleet built (label ftfleet.inputs-hash)."""
    listed = in_host(host, "docker images --no-trunc --filter label=ftfleet.inputs-hash "
                           "--format '{{.Repository}}:{{.Tag}} {{.ID}}'")  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    return dict(line.split() for line in listed.stdout.splitlines() if not line.startswith("registry.ftfleet.test"))


def failure_text(run: Run) -> str:
    return "\n".join(f"{f.host}: {f.task}: {f.message}" for f in run.failures)


def test_each_image_is_built_once_and_pulled_by_the_others(fleet, tmp_path):
    run, status = converge(tmp_path / "first")
    assert status == "successful", failure_text(run)
    counts = steps(run)
    # FT for SM 80: reg-a builds, reg-b waits and pulls; FT for SM 86: reg-c builds; Triton: reg-a
    # builds, the others pull. Each of the three images is built exactly once in the fleet.
    assert counts["build"] == Counter({"ftfleet-reg-a": 2, "ftfleet-reg-c": 1}), counts
    assert counts["push"] == counts["build"], counts
    assert counts["pull"] == Counter({"ftfleet-reg-b": 2, "ftfleet-reg-c": 1}), counts
    ids = {host: image_ids(host) for host in HOSTS}
    triton = {ref for host in HOSTS for ref in ids[host] if ref.startswith("ftfleet/tritonserver-ft:")}
    assert len(triton) == 1, ids
    assert len({ids[h][next(iter(triton))] for h in HOSTS}) == 1, ids  # the same image everywhere
    ft_a = {r: i for r, i in ids["ftfleet-reg-a"].items() if r.startswith("ftfleet/fastertransformer:")}
    ft_b = {r: i for r, i in ids["ftfleet-reg-b"].items() if r.startswith("ftfleet/fastertransformer:")}
    assert ft_a == ft_b, (ft_a, ft_b)
    assert len(ft_a) == 1, ft_a
    assert "sm86" in " ".join(ids["ftfleet-reg-c"]), ids
    assert not set(ft_a) & set(ids["ftfleet-reg-c"]), ids
    # Only the builders read their build logs; the hosts that pulled never built anything.
    assert in_host("ftfleet-reg-b", "ls /srv/ftfleet/images/logs | grep -c log").stdout.strip() in ("", "0")

    again, status = converge(tmp_path / "second")
    assert status == "successful", failure_text(again)
    assert again.changes == [], [f"{c.host}: {c.task}" for c in again.changes]


def test_a_registry_without_the_images_gets_them_from_the_hosts_that_have_them(fleet, tmp_path):
    """The plain-HTTP registry starts empty: per image, the first host that has it pushes it."""
    run, status = converge(tmp_path / "plain", *PLAIN)
    assert status == "successful", failure_text(run)
    counts = steps(run)
    assert counts["build"] == Counter(), counts
    assert counts["pull"] == Counter(), counts
    assert counts["push"] == Counter({"ftfleet-reg-a": 2, "ftfleet-reg-c": 1}), counts
    daemon = json.loads(in_host("ftfleet-reg-b", "cat /etc/docker/daemon.json").stdout)
    assert daemon["insecure-registries"] == ["registry.ftfleet.test:5001"], daemon

    # A host that lost its images pulls them back from there, over plain HTTP.
    assert in_host("ftfleet-reg-b", "docker images -q --filter label=ftfleet.inputs-hash | sort -u "
                                    "| xargs docker rmi -f").returncode == 0  # fmt: skip
    back, status = converge(tmp_path / "plain-again", *PLAIN)
    assert status == "successful", failure_text(back)
    assert steps(back)["pull"] == Counter({"ftfleet-reg-b": 2}), steps(back)


def test_the_registry_down_fails_the_stage_clearly_and_changes_nothing(fleet, tmp_path):
    before = {host: image_ids(host) for host in HOSTS}
    assert in_host("ftfleet-registry", "systemctl stop docker-registry").returncode == 0
    try:
        run, status = converge(tmp_path / "down")
    finally:
        assert in_host("ftfleet-registry", "systemctl start docker-registry").returncode == 0
    assert status == "failed"
    text = failure_text(run)
    assert "registry.ftfleet.test:5000" in text, text
    assert {f.host for f in run.failures} == set(HOSTS), text
    assert run.changes == [], [f"{c.host}: {c.task}" for c in run.changes]
    assert {host: image_ids(host) for host in HOSTS} == before


def test_a_corrupted_blob_is_refused_by_its_digest(fleet, tmp_path):
    """A layer of the Triton image rots in the registry's storage: the host that pulls refuses it."""
    blobs = "/var/lib/docker-registry/docker/registry/v2/blobs/sha256"
    # Every layer blob (the gzipped ones; manifests and configs are JSON) the registry holds.
    corrupt = in_host("ftfleet-registry", f"""set -e
        for data in $(find {blobs} -name data); do
          if ! head -c 1 "$data" | grep -q '{{'; then
            cp "$data" "$data.good"; printf 'rotten' | dd of="$data" bs=1 seek=100 conv=notrunc 2>/dev/null
          fi
        done; ls {blobs}/*/*/data.good | wc -l""")  # fmt: skip
    assert corrupt.returncode == 0, corrupt.stderr
    assert int(corrupt.stdout.split()[-1]) >= 1, corrupt.stdout
    try:
        assert in_host("ftfleet-reg-b", "docker rmi -f $(docker images -q ftfleet/tritonserver-ft | sort -u)"
                       ).returncode == 0  # fmt: skip
        run, status = converge(tmp_path / "rotten", "--limit", "ftfleet-reg-b")
    finally:
        in_host("ftfleet-registry", f'for good in {blobs}/*/*/data.good; do mv "$good" "${{good%.good}}"; done')
    assert status == "failed"
    text = failure_text(run)
    assert "filesystem layer verification failed for digest sha256:" in text, text
    assert in_host("ftfleet-reg-b", "docker images -q ftfleet/tritonserver-ft").stdout.strip() == ""
    healed, status = converge(tmp_path / "healed", "--limit", "ftfleet-reg-b")
    assert status == "successful", failure_text(healed)
    assert steps(healed)["pull"] == Counter({"ftfleet-reg-b": 1}), steps(healed)
