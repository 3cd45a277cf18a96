"""model_checkpoint against local git repositories with LFS objects (stand-ins for the Hub)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, git, run_playbook

from ftdomain.fleet.checkpoint_dir import fleet_checkpoint_dir_id

TOKEN = "hf_SECRET_TOKEN_must_not_leak_1234"


@pytest.fixture
def source(tmp_path):
    """A bare repository with an LFS-tracked weights file on branch `release`, two commits."""
    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", "-b", "release", cwd=work)
    git("lfs", "install", "--local", cwd=work)
    git("lfs", "track", "*.bin", cwd=work)
    (work / "config.json").write_text(json.dumps({"n_embd": 8}))
    (work / "weights.bin").write_bytes(bytes(range(256)) * 64)
    git("add", ".", cwd=work)
    git("commit", "-qm", "first", cwd=work)
    first = git("rev-parse", "HEAD", cwd=work)
    (work / "weights.bin").write_bytes(bytes(reversed(range(256))) * 64)
    git("commit", "-qam", "second", cwd=work)
    second = git("rev-parse", "HEAD", cwd=work)
    bare = tmp_path / "model.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    git("lfs", "push", "--all", f"file://{bare}", cwd=work)
    return {"url": f"file://{bare}", "bare": bare, "first": first, "second": second, "tmp": tmp_path}


def fetch(playbook, source, **model_overrides) -> tuple[int, str]:
    model = {"name": "tiny", "family": "gptj", "source": {"url": source["url"], "revision": "release"}}
    model["source"].update(model_overrides)
    extra = source["tmp"] / "extra.json"
    extra.write_text(json.dumps({"fleet_model": model, "fleet_hf_token": TOKEN,
                                 "fleet_data_root": str(source["tmp"] / "data")}))  # fmt: skip
    play = playbook("- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles: [model_checkpoint]\n")
    result = run_playbook(
        play, "-i", "localhost,", "-e", f"@{extra}", "-e", f"ansible_python_interpreter={sys.executable}"
    )
    return result.returncode, result.stdout + result.stderr


def test_fetch_verify_rerun_and_pin(playbook, source):
    checkout = source["tmp"] / "data" / "checkpoints" / "tiny"
    rc, out = fetch(playbook, source)
    assert rc == 0, out
    assert (checkout / "weights.bin").read_bytes() == bytes(reversed(range(256))) * 64
    assert git("rev-parse", "HEAD", cwd=checkout) == source["second"]
    # The token is in no log, no .git/config, no file of the checkout.
    assert TOKEN not in out
    assert TOKEN not in (checkout / ".git" / "config").read_text()
    assert not subprocess.run(["grep", "-rl", TOKEN, str(checkout)], capture_output=True, check=False).stdout

    rc, out = fetch(playbook, source)  # already at the commit: nothing happens
    assert rc == 0, out
    assert "changed=0" in out

    rc, out = fetch(playbook, source, commit=source["first"])  # pin the older commit
    assert rc == 0, out
    assert git("rev-parse", "HEAD", cwd=checkout) == source["first"]
    assert (checkout / "weights.bin").read_bytes() == bytes(range(256)) * 64


def test_missing_lfs_object_is_an_error_not_a_pointer(playbook, source):
    shutil.rmtree(source["bare"] / "lfs" / "objects")
    rc, out = fetch(playbook, source)
    assert rc != 0, out
    assert "weights.bin" in out


def test_unknown_revision_and_wrong_commit_fail_clearly(playbook, source):
    rc, out = fetch(playbook, source, revision="no-such-branch")
    assert rc != 0
    assert "fleet_model.source.revision=no-such-branch is not on" in out
    rc, out = fetch(playbook, source, commit="0" * 40)
    assert rc != 0
    assert TOKEN not in out


def test_an_interrupted_pull_resumes_on_the_next_run(playbook, source):
    objects = source["bare"] / "lfs" / "objects"
    aside = source["tmp"] / "objects-aside"
    objects.rename(aside)  # the download breaks off: the object cannot be fetched
    rc, out = fetch(playbook, source)
    assert rc != 0
    assert "are LFS pointers, not their content: weights.bin" in out
    aside.rename(objects)  # the network is back
    rc, out = fetch(playbook, source)
    assert rc == 0, out
    checkout = source["tmp"] / "data" / "checkpoints" / "tiny"
    assert (checkout / "weights.bin").read_bytes() == bytes(reversed(range(256))) * 64


def copy_from(playbook, tmp: Path, directory: Path, *, check: bool = False) -> tuple[int, str]:
    extra = tmp / "extra-dir.json"
    extra.write_text(json.dumps({"fleet_model": {"name": "tiny", "family": "gptj", "source": {"path": str(directory)}},
                                 "fleet_data_root": str(tmp / "data")}))  # fmt: skip
    play = playbook("- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles: [model_checkpoint]\n")
    args = ["-i", "localhost,", "-e", f"@{extra}", "-e", f"ansible_python_interpreter={sys.executable}"]
    result = run_playbook(play, *args, *(["--check"] if check else []))
    return result.returncode, result.stdout + result.stderr


def listing(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_checkpoint_directory_is_copied_kept_in_step_and_left_alone(playbook, source):
    """fleet_model.source.path: the directory is copied as it is (.git left out) over what a git
    checkout left, a second run changes nothing, a changed or removed file there is changed or
    removed here, and a file broken here (the record intact) is copied again."""
    tmp = source["tmp"]
    directory = tmp / "upload"
    (directory / "sub").mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"n_embd": 8}))
    (directory / "weights.bin").write_bytes(bytes(range(256)) * 64)
    (directory / "sub" / "notes.txt").write_text("kept")
    (directory / ".git").mkdir()
    (directory / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    checkout = tmp / "data" / "checkpoints" / "tiny"
    (checkout / ".git").mkdir(parents=True)  # what a git checkout of another source left here
    (checkout / ".git" / "HEAD").write_text("ref: refs/heads/release\n")
    (checkout / "old-weights.bin").write_bytes(b"old")

    rc, out = copy_from(playbook, tmp, directory, check=True)
    assert rc == 0, out
    assert (checkout / "old-weights.bin").exists()  # check mode changed nothing

    rc, out = copy_from(playbook, tmp, directory)
    assert rc == 0, out
    wanted = {k: v for k, v in listing(directory).items() if not k.startswith(".git")}
    assert {k: v for k, v in listing(checkout).items() if k != ".ftfleet-source"} == wanted
    assert not (checkout / ".git").exists()
    assert (checkout / ".ftfleet-source").read_text().strip() == fleet_checkpoint_dir_id(str(directory))

    rc, out = copy_from(playbook, tmp, directory)
    assert rc == 0, out
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0", out), out

    (directory / "weights.bin").write_bytes(bytes(reversed(range(256))) * 64)
    (directory / "sub" / "notes.txt").unlink()
    rc, out = copy_from(playbook, tmp, directory)
    assert rc == 0, out
    assert (checkout / "weights.bin").read_bytes() == bytes(reversed(range(256))) * 64
    assert not (checkout / "sub").exists()

    (checkout / "config.json").write_text("{")  # a broken copy, its record intact
    rc, out = copy_from(playbook, tmp, directory)
    assert rc == 0, out
    assert (checkout / "config.json").read_text() == json.dumps({"n_embd": 8})


def lfs_objects(checkout: Path) -> int:
    return sum(1 for p in (checkout / ".git" / "lfs" / "objects").rglob("*") if p.is_file())


def test_the_previous_revision_comes_back_without_the_source_and_older_ones_go(playbook, source):
    """Two revisions side by side (issue 36): going back to the commit checked out before asks
    the source for nothing (here it is gone), and the LFS objects of the current and the
    previous revision stay while older ones are removed."""
    checkout = source["tmp"] / "data" / "checkpoints" / "tiny"
    assert fetch(playbook, source, commit=source["first"])[0] == 0
    assert fetch(playbook, source, commit=source["second"])[0] == 0
    assert lfs_objects(checkout) == 2
    away = source["tmp"] / "source-away.git"
    source["bare"].rename(away)  # the source is unreachable from here on
    for commit, weights in ((source["first"], bytes(range(256))), (source["second"], bytes(reversed(range(256))))):
        rc, out = fetch(playbook, source, commit=commit)
        assert rc == 0, out
        assert git("rev-parse", "HEAD", cwd=checkout) == commit
        assert (checkout / "weights.bin").read_bytes() == weights * 64
    away.rename(source["bare"])

    work = source["tmp"] / "work"  # a third revision at the source
    (work / "weights.bin").write_bytes(bytes(range(128)) * 128)
    git("commit", "-qam", "third", cwd=work)
    third = git("rev-parse", "HEAD", cwd=work)
    git("push", "-q", source["url"], "release", cwd=work)
    git("lfs", "push", "--all", source["url"], cwd=work)
    assert fetch(playbook, source, commit=third)[0] == 0
    assert lfs_objects(checkout) == 2  # the third's and the second's (previous); the first's went
    source["bare"].rename(away)
    rc, out = fetch(playbook, source, commit=source["second"])
    assert rc == 0, out
    rc, out = fetch(playbook, source, commit=source["first"])  # two back: its objects are gone
    assert rc != 0
    assert "are LFS pointers, not their content: weights.bin" in out, out


def test_preflight_reads_a_pinned_commit_it_read_before_without_the_source(source):
    """Preflight reads config.json on the controller (roles/preflight/files/fetch-model-config);
    going back to a commit it read before (the previous revision) must not need the source."""
    script = ROOT / "roles" / "preflight" / "files" / "fetch-model-config"
    cache = source["tmp"] / "cache"

    def read(commit: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(script), source["url"], "release", commit, str(cache)], capture_output=True,
                              text=True, check=False, env={**os.environ, "FTFLEET_PYTHON": sys.executable})  # fmt: skip

    for commit in (source["first"], source["second"]):
        done = read(commit)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["commit"] == commit
    source["bare"].rename(source["tmp"] / "away.git")
    again = read(source["first"])
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["commit"] == source["first"]
    assert read("0" * 40).returncode != 0  # a commit never read needs the source


def test_the_script_goes_back_to_the_previous_revision_from_what_is_here(playbook, source):
    """fetch-checkpoint previous (role canary's rollback): the commit checked out before comes
    back from the objects kept here, the source gone, and becomes the previous one in turn;
    a directory that is no checkout, or one with no previous revision, is refused, unchanged."""
    script = ROOT / "roles" / "model_checkpoint" / "files" / "fetch-checkpoint"
    checkout = source["tmp"] / "data" / "checkpoints" / "tiny"

    def back(where: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(script), "previous", str(where), ""], capture_output=True, text=True, check=False)

    assert fetch(playbook, source, commit=source["first"])[0] == 0
    refused = back(checkout)  # one revision only: nothing to go back to
    assert refused.returncode == 3, refused.stderr
    assert "has no previous revision" in refused.stderr
    assert fetch(playbook, source, commit=source["second"])[0] == 0
    source["bare"].rename(source["tmp"] / "away.git")
    for commit, weights in ((source["first"], bytes(range(256))), (source["second"], bytes(reversed(range(256))))):
        done = back(checkout)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split()[-1] == commit
        assert git("rev-parse", "HEAD", cwd=checkout) == commit
        assert (checkout / "weights.bin").read_bytes() == weights * 64
    assert git("rev-parse", "refs/ftfleet/previous", cwd=checkout) == source["first"]
    plain = source["tmp"] / "pulled"  # the small files a registry pull leaves: no git checkout
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    done = back(plain)
    assert done.returncode == 4, done.stderr
    assert "is not a git checkout" in done.stderr
