"""A fleet that shares a registry builds each image once and converts each set of shards once: a
real Docker Distribution (Debian's docker-registry) with TLS from a test CA and basic auth, and a
second one on plain HTTP; three hosts with Docker inside, two of which need the same FT image and
the same shards (a tiny GPT-J at tp 1; the third at tp 2). Builds, conversions, fetches, pushes and
pulls are counted from the runs' ansible-runner events (ftfleet's own event model), never from
text. Then the faults: the registry down, a corrupted blob, pushes and pulls killed part-way."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import ansible_runner
import pytest
from conftest import BIN, ROOT, failed_tasks, run_playbook

from ftfleet.cli import callback_path
from ftfleet.events import Run, Step

pytestmark = pytest.mark.docker
FIXTURE = ROOT / "tests" / "fixtures" / "registry"
SHARED = Path("/tmp/ftfleet-registry-test")  # the relays' sockets, the CA; platforms.yml mounts it
HOSTS = ("ftfleet-reg-a", "ftfleet-reg-b", "ftfleet-reg-c")
PLAIN = ["-e", "fleet_registry=registry.ftfleet.test:5001/ftfleet", "-e", '{"fleet_registry_insecure": true}',
         "-e", "fleet_registry_username=", "-e", "fleet_registry_password=",
         "-e", "fleet_registry_ca_certificate="]  # fmt: skip
STEPS = {"build": "build | Start the build", "push": "push | Push", "pull": "pull | Pull"}
MODELS = ["-e", f"@{FIXTURE / 'models-vars.yml'}"]
MODEL_STEPS = {  # kind -> (role, task name prefix)
    "fetch": ("model_checkpoint", "fetch | Fetch the revision"),
    "convert": ("ft_convert", "engine-native | Convert"),
    "push": ("ft_convert", "push | Push the shards"),
    "pull": ("ft_convert", "pull | Pull the shards"),
    "tune": ("ft_gemm_tune", "tune | Run gpt_gemm"),
    "gemm-push": ("ft_gemm_tune", "transfer | Push the tuned file"),
    "gemm-pull": ("ft_gemm_tune", "transfer | Pull the tuned file"),
}
MODEL_DIR = "/srv/ftfleet/models/tiny/fastertransformer/1"
GEMM = "/srv/ftfleet/serving/tiny/gemm_config.in"  # where tritonserver reads the tuned file
CHECKPOINT = "/srv/ftfleet/checkpoints/tiny"
ARTIFACT = ("cd /srv/ftfleet/tools && PYTHONPATH=ftnative.zip registry-venv/bin/python -m ftnative.artifact "
            "--ca registry-ca.pem")  # fmt: skip
CREDENTIALS = '{"username": "fleet", "password": "ftf-registry-test-password"}'
BLOBS = "/var/lib/docker-registry/docker/registry/v2/blobs/sha256"


def sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)


def in_host(host: str, command: str) -> subprocess.CompletedProcess[str]:
    return sh("docker", "exec", host, "bash", "-c", command)


@pytest.fixture(scope="module")
def fleet():
    shutil.rmtree(SHARED, ignore_errors=True)
    SHARED.mkdir(parents=True)
    platforms = f"@{FIXTURE / 'platforms.yml'}"
    made = sh(str(BIN / "python"), str(ROOT / "scripts" / "make-tiny-model"), "--family", "gptj", "--name", "tiny-gptj",
              "--dest", str(SHARED / "models"))  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    for recording in ("a100x1", "l40sx4"):  # the hosts' nvidia-smi (inventory.yml), links followed
        shutil.copytree(ROOT / "tests" / "fixtures" / "gpus" / recording, SHARED / "gpus" / recording)
    try:
        created = run_playbook("molecule/resources/create.yml", "-e", platforms)
        assert created.returncode == 0, failed_tasks(created.stdout + created.stderr)
        prepared = run_playbook("-i", FIXTURE / "inventory.yml", FIXTURE / "prepare.yml")
        assert prepared.returncode == 0, failed_tasks(prepared.stdout + prepared.stderr)
        yield
    finally:
        run_playbook("molecule/resources/destroy.yml", "-e", platforms)
        shutil.rmtree(SHARED, ignore_errors=True)


def converge(work: Path, *cmdline: str, playbook: str = "converge.yml") -> tuple[Run, str]:
    """The image roles (or another playbook of the fixture) on the three hosts through
    ansible-runner; the events fill a Run."""
    run = Run(stages={})
    work.mkdir(parents=True, exist_ok=True)
    runner = ansible_runner.run(
        private_data_dir=str(work), project_dir=str(ROOT), playbook=str(FIXTURE / playbook),
        inventory=str(FIXTURE / "inventory.yml"), cmdline=shlex.join(cmdline), quiet=True, event_handler=run.handle,
        envvars={"ANSIBLE_NOCOLOR": "1", "PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin",
                 "ANSIBLE_SKIP_TAGS": "serve",  # the rollout's models stage only (models.yml)
                 **callback_path()},  # ansible.cfg's callbacks (fleet_warm), as ftfleet apply runs them
    )  # fmt: skip
    if runner.status != "successful" and not run.failures:  # Ansible itself refused: keep its words
        run.failures.append(Step(host="-", stage="", role="", task="ansible-playbook", duration=0.0, handler=False,
                                 message=runner.stdout.read()[-3000:]))  # fmt: skip
    return run, runner.status


def steps(run: Run) -> dict[str, Counter]:
    """build/push/pull of images -> Counter of hosts that did it (changed tasks only; the shards'
    push and pull tasks, in a run of both stages, are ft_convert's and counted by model_steps)."""
    counts = {kind: Counter() for kind in STEPS}
    for step in run.changes:
        for kind, prefix in STEPS.items():
            if step.task.startswith(prefix) and step.role != "ft_convert":
                counts[kind][step.host] += 1
    return counts


def model_steps(run: Run) -> dict[str, Counter]:
    """fetch/convert/push/pull of the models stage -> Counter of hosts that did it (changed tasks)."""
    counts = {kind: Counter() for kind in MODEL_STEPS}
    for step in run.changes:
        for kind, (role, prefix) in MODEL_STEPS.items():
            if step.role == role and step.task.startswith(prefix):
                counts[kind][step.host] += 1
    return counts


def shards(host: str, tp: int = 1) -> dict[str, str]:
    """file -> sha256 of the published shard directory (conversion.json included)."""
    listed = in_host(host, f"cd {MODEL_DIR}/{tp}-gpu && sha256sum *")
    assert listed.returncode == 0, listed.stderr
    return {name: digest for digest, name in (line.split() for line in listed.stdout.splitlines())}


def published(host: str) -> str:
    """Where <tp>-gpu points, and whether what it points at verifies."""
    state = in_host(host, f"readlink {MODEL_DIR}/1-gpu && PYTHONPATH=/srv/ftfleet/tools/ftnative.zip "
                          f"python3 -m ftnative.verify {MODEL_DIR}/1-gpu")  # fmt: skip
    return state.stdout.strip()


def corrupt_blobs() -> int:
    """Rot every binary blob (image layers, weight files; not the JSON ones) in the registry's
    storage, keeping the good bytes aside; returns how many."""
    corrupt = in_host("ftfleet-registry", f"""set -e
        for data in $(find {BLOBS} -name data); do
          if ! head -c 1 "$data" | grep -q '[{{[]'; then
            cp "$data" "$data.good"; printf 'rotten' | dd of="$data" bs=1 seek=100 conv=notrunc 2>/dev/null
          fi
        done; ls {BLOBS}/*/*/data.good | wc -l""")  # fmt: skip
    assert corrupt.returncode == 0, corrupt.stderr
    return int(corrupt.stdout.split()[-1])


def restore_blobs() -> None:
    in_host("ftfleet-registry", f'for good in {BLOBS}/*/*/data.good; do mv "$good" "${{good%.good}}"; done')


def image_ids(host: str) -> dict[str, str]:
    """ref -> image id of the images ftfleet built (label ftfleet.inputs-hash)."""
    listed = in_host(host, "docker images --no-trunc --filter label=ftfleet.inputs-hash "
                           "--format '{{.Repository}}:{{.Tag}} {{.ID}}'")  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    return dict(line.split() for line in listed.stdout.splitlines() if not line.startswith("registry.ftfleet.test"))


def failure_text(run: Run) -> str:
    return "\n".join(f"{f.host}: {f.task}: {f.message}" for f in run.failures)


def images_seen(run: Run) -> str:
    """For a failure's message: each host's images with their creation times, and the run's
    changed tasks (a build needs none when the host already had the image)."""
    listing = {host: in_host(host, "docker images --format '{{.Repository}}:{{.Tag}} {{.CreatedAt}}'").stdout
               for host in HOSTS}  # fmt: skip
    return f"images: {json.dumps(listing, indent=1)}\nchanged: {[f'{c.host}: {c.task}' for c in run.changes]}"


def each_image_was_built_once_and_pulled_by_the_others(run: Run) -> None:
    counts = steps(run)
    # FT for SM 80: reg-a builds, reg-b waits and pulls; FT for SM 86: reg-c builds; Triton: reg-a
    # builds, the others pull. Each of the three images is built exactly once in the fleet.
    assert counts["build"] == Counter({"ftfleet-reg-a": 2, "ftfleet-reg-c": 1}), (counts, images_seen(run))
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


def each_set_of_shards_and_tuned_file_was_made_once(run: Run) -> None:
    """-a and -b need the tiny model at tp 1 on an A100, -c at tp 2 on L40S: two conversions and
    two tunings in the fleet, each by the first host that needs it; -b pulls both, and fetches
    nothing from the model's source."""
    counts = model_steps(run)
    assert counts["convert"] == Counter({"ftfleet-reg-a": 1, "ftfleet-reg-c": 1}), counts
    assert counts["fetch"] == counts["convert"], counts
    assert counts["push"] == counts["convert"], counts
    assert counts["pull"] == Counter({"ftfleet-reg-b": 1}), counts
    # gemm_config.in per GPU model and gpt_gemm arguments: -a tunes for the A100 at tp 1 and
    # pushes, -b pulls that file; -c tunes its own (L40S, tp 2).
    assert counts["tune"] == Counter({"ftfleet-reg-a": 1, "ftfleet-reg-c": 1}), counts
    assert counts["gemm-push"] == counts["tune"], counts
    assert counts["gemm-pull"] == Counter({"ftfleet-reg-b": 1}), counts
    tuned = {host: in_host(host, f"cat {GEMM}").stdout for host in HOSTS}
    assert tuned["ftfleet-reg-b"] == tuned["ftfleet-reg-a"] != tuned["ftfleet-reg-c"], tuned
    assert "gpt_gemm stand-in: 8 1 32" in tuned["ftfleet-reg-b"], tuned
    # Bytes from the model's source: what git and git-lfs brought into each checkout.
    fetched = {host: in_host(host, f"du -sb {CHECKPOINT}/.git 2>/dev/null | cut -f1").stdout.strip() or "0"
               for host in HOSTS}  # fmt: skip
    assert fetched["ftfleet-reg-b"] == "0", fetched
    assert int(fetched["ftfleet-reg-a"]) > 600_000, fetched  # the tiny model's weights are 660 kB
    assert int(fetched["ftfleet-reg-c"]) > 600_000, fetched
    assert shards("ftfleet-reg-b") == shards("ftfleet-reg-a")  # the same bytes, conversion.json included
    assert shards("ftfleet-reg-c", tp=2).keys() != shards("ftfleet-reg-a").keys()
    # -b has the checkpoint's small files (tokenizer, config.json), no weights, and the model's
    # Triton repository was written from them.
    files = in_host("ftfleet-reg-b", f"ls -A {CHECKPOINT}").stdout.split()
    assert {"config.json", "tokenizer.json", ".ftfleet-artifact.json"} <= set(files), files
    assert not [name for name in files if name.endswith((".safetensors", ".bin")) or name == ".git"], files
    assert in_host("ftfleet-reg-b", "test -s /srv/ftfleet/models/tiny/preprocessing/config.pbtxt").returncode == 0


def test_one_run_builds_each_image_and_makes_each_set_of_shards_and_tuned_file_once(fleet, tmp_path):
    """The images and the models stages in one run over the three hosts, counted from its events."""
    run, status = converge(tmp_path / "first", *MODELS, playbook="site.yml")
    assert status == "successful", failure_text(run)
    each_image_was_built_once_and_pulled_by_the_others(run)
    each_set_of_shards_and_tuned_file_was_made_once(run)

    again, status = converge(tmp_path / "second", *MODELS, playbook="site.yml")
    assert status == "successful", failure_text(again)
    assert again.changes == [], [f"{c.host}: {c.task}" for c in again.changes]
    # Check mode (ftfleet plan) of the models stage asks the registry too, and finds nothing to do.
    checked, status = converge(tmp_path / "models-check", *MODELS, "--check", playbook="models.yml")
    assert status == "successful", failure_text(checked)
    assert checked.changes == [], [f"{c.host}: {c.task}" for c in checked.changes]


def test_an_empty_plain_registry_gets_every_artifact_from_the_hosts_that_have_them(fleet, tmp_path):
    """The plain-HTTP registry starts empty: per image, set of shards and tuned file, the first
    host that has it pushes it (nothing is built, converted or tuned); a host that lost them all
    pulls them back over HTTP. Both stages in each run, as ftfleet apply runs them."""
    run, status = converge(tmp_path / "plain", *MODELS, *PLAIN, playbook="site.yml")
    assert status == "successful", failure_text(run)
    counts, models = steps(run), model_steps(run)
    assert counts["build"] == Counter(), counts
    assert counts["pull"] == Counter(), counts
    assert counts["push"] == Counter({"ftfleet-reg-a": 2, "ftfleet-reg-c": 1}), (counts, images_seen(run))
    assert models["push"] == models["gemm-push"] == Counter({"ftfleet-reg-a": 1, "ftfleet-reg-c": 1}), models
    assert not models["convert"] + models["tune"] + models["fetch"] + models["pull"] + models["gemm-pull"], models
    daemon = json.loads(in_host("ftfleet-reg-b", "cat /etc/docker/daemon.json").stdout)
    assert daemon["insecure-registries"] == ["registry.ftfleet.test:5001"], daemon

    # -b loses its images, its shards and its tuned file.
    digests = shards("ftfleet-reg-b")
    assert in_host("ftfleet-reg-b", "docker images -q --filter label=ftfleet.inputs-hash | sort -u "
                                    f"| xargs docker rmi -f && rm -rf {MODEL_DIR} /srv/ftfleet/gemm-cache"
                   ).returncode == 0  # fmt: skip
    # Check mode says what would come from the registry, and takes nothing.
    checked, status = converge(tmp_path / "plain-check", *MODELS, *PLAIN, "--check", "--limit", "ftfleet-reg-b",
                               playbook="models.yml")  # fmt: skip
    assert status == "successful", failure_text(checked)
    said = " ".join(" ".join(note["message"].split()) for note in checked.notes)
    assert "would be pulled from registry.ftfleet.test:5001/ftfleet/gemm/" in said, said
    assert in_host("ftfleet-reg-b", f"ls -A {MODEL_DIR} /srv/ftfleet/gemm-cache 2>/dev/null").stdout.strip() == ""
    # It pulls them all back from there, over plain HTTP (-b alone: the others have everything,
    # and the first run of this test counted what they push).
    back, status = converge(tmp_path / "plain-again", *MODELS, *PLAIN, "--limit", "ftfleet-reg-b",
                            playbook="site.yml")  # fmt: skip
    assert status == "successful", failure_text(back)
    assert steps(back)["pull"] == Counter({"ftfleet-reg-b": 2}), steps(back)
    models = model_steps(back)
    assert models["pull"] == models["gemm-pull"] == Counter({"ftfleet-reg-b": 1}), models
    assert not models["convert"] + models["tune"] + models["fetch"], models
    assert shards("ftfleet-reg-b") == digests


def converge_with_the_registry_down(work: Path, *cmdline: str, playbook: str = "converge.yml") -> str:
    """Converge while the TLS registry is stopped; every host must fail and nothing change.
    Returns the failures' text."""
    assert in_host("ftfleet-registry", "systemctl stop docker-registry").returncode == 0
    try:
        run, status = converge(work, *cmdline, playbook=playbook)
    finally:
        assert in_host("ftfleet-registry", "systemctl start docker-registry").returncode == 0
    assert status == "failed"
    text = failure_text(run)
    assert {f.host for f in run.failures} == set(HOSTS), text
    assert run.changes == [], [f"{c.host}: {c.task}" for c in run.changes]
    return text


def test_the_registry_down_fails_the_stage_clearly_and_changes_nothing(fleet, tmp_path):
    before = {host: image_ids(host) for host in HOSTS}
    text = converge_with_the_registry_down(tmp_path / "down")
    assert "registry.ftfleet.test:5000" in text, text
    assert {host: image_ids(host) for host in HOSTS} == before


def test_a_corrupted_blob_is_refused_by_its_digest(fleet, tmp_path):
    """A layer of the Triton image rots in the registry's storage: the host that pulls refuses it."""
    assert corrupt_blobs() >= 1
    try:
        assert in_host("ftfleet-reg-b", "docker rmi -f $(docker images -q ftfleet/tritonserver-ft | sort -u)"
                       ).returncode == 0  # fmt: skip
        run, status = converge(tmp_path / "rotten", "--limit", "ftfleet-reg-b")
    finally:
        restore_blobs()
    assert status == "failed"
    text = failure_text(run)
    assert "filesystem layer verification failed for digest sha256:" in text, text
    assert in_host("ftfleet-reg-b", "docker images -q ftfleet/tritonserver-ft").stdout.strip() == ""
    healed, status = converge(tmp_path / "healed", "--limit", "ftfleet-reg-b")
    assert status == "successful", failure_text(healed)
    assert steps(healed)["pull"] == Counter({"ftfleet-reg-b": 1}), steps(healed)


def kill_repeatedly(host: str, command: str, state) -> list:
    """Run `command` on `host` under SIGKILL after 0.05 s, then each time 7 % later, until a run
    completes; returns what `state()` saw after each kill. (Steps in proportion to the time, not of
    0.05 s: as finely spread over a run of the command, and half the tries on a loaded machine.
    From 0.05 s, not 0.30 s: on a machine twice as fast as this one the whole push was done within
    0.30 s and every kill landed on the process's way out, CI of 9909a02.)"""
    seen, seconds = [], 0.05
    while seconds < 8:
        done = in_host(host, f"timeout -s KILL {seconds:.2f} bash -c {shlex.quote(command)}")
        if done.returncode == 0:
            return seen
        assert done.returncode == 137, done.stderr  # killed, not failed
        seen.append(state())
        seconds *= 1.07
    raise AssertionError(f"{command} did not complete in 8 s")


def test_a_killed_push_tags_nothing_and_a_killed_pull_publishes_nothing(fleet, tmp_path):
    inputs = json.loads(in_host("ftfleet-reg-a", f"cat {MODEL_DIR}/1-gpu/conversion.json").stdout)["inputs"]
    # A repository of its own: every blob must go up (none is linked there yet), so a kill can
    # land between blobs; each new try sends only what is missing.
    repository = "ftfleet/shards/killed-push-test"
    ref = f"registry.ftfleet.test:5000/{repository}:killed"
    args = f"--inputs {shlex.quote(json.dumps(inputs))} <<< {shlex.quote(CREDENTIALS)}"
    storage = f"/var/lib/docker-registry/docker/registry/v2/repositories/{repository}"
    # Distinct blobs: files of equal content are one blob (the config blob is conversion.json).
    distinct = in_host("ftfleet-reg-a", f"cd {MODEL_DIR}/1-gpu && sha256sum * {CHECKPOINT}/*.json "
                                        "| cut -d' ' -f1 | sort -u | wc -l")  # fmt: skip
    blobs = int(distinct.stdout.strip())

    def registry_state() -> tuple[int, bool]:
        """(blobs linked in the repository, whether the tag exists)"""
        linked = in_host("ftfleet-registry", f"ls {storage}/_layers/sha256 2>/dev/null | wc -l").stdout.strip()
        return int(linked), in_host("ftfleet-registry", f"test -d {storage}/_manifests/tags/killed").returncode == 0

    push = f"{ARTIFACT} push {ref} --shards {MODEL_DIR}/1-gpu --checkpoint {CHECKPOINT} {args}"
    states = kill_repeatedly("ftfleet-reg-a", push, registry_state)
    # Killed between blobs at least once, untagged then; and a tag only ever with every blob in
    # (a kill may also land after the manifest, on the process's way out).
    assert any(0 < linked < blobs and not tagged for linked, tagged in states), states
    assert all(linked == blobs for linked, tagged in states if tagged), states
    assert registry_state() == (blobs, True)

    before, digests = published("ftfleet-reg-b"), shards("ftfleet-reg-b")
    assert before.endswith("ok"), before
    # Builds and incoming directories besides the published build and the previous one (kept for
    # going back a revision: the .1-gpu.previous link and its build).
    count_builds = (f"cd {MODEL_DIR} && {{ ls -A | grep '^[.]1-gpu[.]' | grep -vxF -e .1-gpu.previous "
                    f"-e \"$(readlink 1-gpu)\" -e \"$(readlink .1-gpu.previous || echo none)\"; "
                    f"ls -A {CHECKPOINT} | grep '^[.]ftfleet-pull'; }} | wc -l")  # fmt: skip

    def host_state() -> tuple[int, str]:
        """(unpublished builds and incoming directories on -b, what -b publishes and whether it verifies)"""
        return int(in_host("ftfleet-reg-b", count_builds).stdout.strip()), published("ftfleet-reg-b")

    pull = f"{ARTIFACT} pull {ref} --output {MODEL_DIR} --checkpoint {CHECKPOINT} {args}"
    states = kill_repeatedly("ftfleet-reg-b", pull, host_state)
    assert any(count > 0 for count, _ in states), states  # killed part-way through a download at least once
    # After every kill, what -b publishes is a complete set that verifies: the one from before,
    # or the build of a pull that had flipped it before the kill landed.
    assert all(shown.endswith("ok") for _, shown in states), states
    after = published("ftfleet-reg-b")
    assert after.endswith("ok"), after
    assert after != before, after  # the pull that completed published a new build
    assert shards("ftfleet-reg-b") == digests
    assert in_host("ftfleet-reg-b", count_builds).stdout.strip() == "0"  # leftovers gone
    # the published build, the one it replaced and the link to that: nothing older
    kept = in_host("ftfleet-reg-b", f"ls -A {MODEL_DIR} | grep -c '^[.]1-gpu[.]'").stdout.strip()
    assert kept == "3", kept
    run, status = converge(tmp_path / "after-kills", *MODELS, playbook="models.yml")
    assert status == "successful", failure_text(run)
    assert run.changes == [], [f"{c.host}: {c.task}" for c in run.changes]


def models_on_b_with_rotten_blobs(work: Path) -> str:
    """The models stage on -b while the registry's binary blobs are rotten: it must fail, refusing
    a blob by its digest. Returns the failures' text."""
    assert corrupt_blobs() >= 1
    try:
        run, status = converge(work, *MODELS, "--limit", "ftfleet-reg-b", playbook="models.yml")
    finally:
        restore_blobs()
    assert status == "failed"
    text = failure_text(run)
    assert "refused (a corrupted blob in the registry?)" in text, text
    return text


def test_a_corrupted_shard_blob_is_refused_and_nothing_is_published(fleet, tmp_path):
    # -b must pull its shards and its tuned file again
    assert in_host("ftfleet-reg-b", f"rm -rf {MODEL_DIR} /srv/ftfleet/gemm-cache").returncode == 0
    text = models_on_b_with_rotten_blobs(tmp_path / "rotten")
    assert "the manifest says" in text, text
    assert in_host("ftfleet-reg-b", f"ls -A {MODEL_DIR}").stdout.split() == [], "something was published"
    healed, status = converge(tmp_path / "healed", *MODELS, "--limit", "ftfleet-reg-b", playbook="models.yml")
    assert status == "successful", failure_text(healed)
    assert model_steps(healed)["pull"] == Counter({"ftfleet-reg-b": 1}), model_steps(healed)
    assert model_steps(healed)["gemm-pull"] == Counter({"ftfleet-reg-b": 1}), model_steps(healed)
    assert model_steps(healed)["tune"] == Counter(), model_steps(healed)
    assert shards("ftfleet-reg-b") == shards("ftfleet-reg-a")

    # The tuned file's blob rots too: refused by digest, and the cache gets no slot.
    assert in_host("ftfleet-reg-b", "rm -rf /srv/ftfleet/gemm-cache").returncode == 0
    text = models_on_b_with_rotten_blobs(tmp_path / "rotten-gemm")
    assert "ft_gemm_tune: pulling registry.ftfleet.test:5000/ftfleet/gemm/" in text, text
    assert in_host("ftfleet-reg-b", "find /srv/ftfleet/gemm-cache -name gemm_config.in").stdout.strip() == ""


def test_the_registry_down_fails_the_models_stage_clearly_and_changes_nothing(fleet, tmp_path):
    before = {host: published(host) for host in HOSTS[:2]}
    text = converge_with_the_registry_down(tmp_path / "models-down", *MODELS, playbook="models.yml")
    assert "registry.ftfleet.test:5000: the registry cannot be reached" in text, text
    assert {host: published(host) for host in HOSTS[:2]} == before
