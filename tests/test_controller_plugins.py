"""callback_plugins/fleet_warm.py: the controller loads the filter and test plugins once, before it
forks its workers, and every worker inherits them (docs/performance.md, "A thousand hosts"); each
module's payload is built once across runs, in a folder of its sources, and gets its bytecode when
the next task starts; local modules run without PYTHONUNBUFFERED."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import ROOT, run_playbook
from tritonlocal import other_python

from ftfleet.cli import callback_path

HOSTS = 4
TASKS = 2

# A filter plugin file that writes the process it is imported in: Ansible imports every filter file
# it can see when a process first templates any filter, so this file says which processes did.
PROBE = """
import os
with open(os.environ["FLEET_PROBE_LOG"], "a") as log:
    log.write(f"{os.getpid()}\\n")

class FilterModule:
    def filters(self):
        return {"fleet_probe_identity": lambda value: value}
"""

PLAY = """
- name: Tasks that template a builtin filter on every host
  hosts: all
  gather_facts: false
  tasks:
    - name: A filter in a condition
      ansible.builtin.assert:
        that: groups['all'] | length == HOSTS
        quiet: true

    - name: A filter in a fact
      ansible.builtin.set_fact:
        __count: "{{ groups['all'] | length }}"
""".replace("HOSTS", str(HOSTS))


def _local_inventory(tmp_path, hosts: list[str]):
    """An inventory of `hosts` reached on the local connection with this Python."""
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(json.dumps({"all": {"hosts": dict.fromkeys(hosts, local)}}))
    return inventory


def _importers(tmp_path, callbacks: str) -> list[str]:
    """The processes that imported the probe during a run of PLAY with these callbacks enabled."""
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    (probe / "zz_fleet_probe.py").write_text(PROBE)
    log = tmp_path / f"imports-{'warm' if 'fleet_warm' in callbacks else 'cold'}.log"
    inventory = _local_inventory(tmp_path, [f"node{n}" for n in range(HOSTS)])
    (tmp_path / "play.yml").write_text(PLAY)
    done = run_playbook(
        "-i", inventory, tmp_path / "play.yml",
        ANSIBLE_FILTER_PLUGINS=f"{ROOT / 'filter_plugins'}{os.pathsep}{probe}",
        ANSIBLE_CALLBACKS_ENABLED=callbacks, FLEET_PROBE_LOG=str(log),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Skipping callback" not in done.stdout + done.stderr
    return log.read_text().split()


def test_workers_inherit_the_filter_plugins_the_controller_loaded(tmp_path):
    """With fleet_warm (ansible.cfg enables it) the filter files are imported once, in the
    controller; without it, once in every worker: one per host and task."""
    warm = _importers(tmp_path, "ansible.posix.profile_tasks,fleet_warm")
    cold = _importers(tmp_path, "ansible.posix.profile_tasks")
    print(f"processes that imported the filter plugins: {len(warm)} with fleet_warm, {len(cold)} without")
    assert len(warm) == 1, warm
    assert len(cold) == HOSTS * TASKS, cold  # the probe does see every worker's import


def test_ansible_cfg_enables_it_and_ftfleet_keeps_its_folder_before_ansible_runners():
    """ansible-runner sets ANSIBLE_CALLBACK_PLUGINS to its own folder, replacing ansible.cfg's path:
    ftfleet (and scripts/scale-bench) put callback_plugins/ first, keeping what the user set."""
    cfg = (ROOT / "ansible.cfg").read_text()
    assert "callback_plugins = callback_plugins" in cfg
    assert "fleet_warm" in next(line for line in cfg.splitlines() if line.startswith("callbacks_enabled"))
    os.environ.pop("ANSIBLE_CALLBACK_PLUGINS", None)
    assert callback_path() == {"ANSIBLE_CALLBACK_PLUGINS": str(ROOT / "callback_plugins")}
    os.environ["ANSIBLE_CALLBACK_PLUGINS"] = "/opt/mine"
    try:
        assert callback_path()["ANSIBLE_CALLBACK_PLUGINS"].split(os.pathsep) == [
            str(ROOT / "callback_plugins"), "/opt/mine"]  # fmt: skip
    finally:
        del os.environ["ANSIBLE_CALLBACK_PLUGINS"]


MODULES_PLAY = """
- name: Tasks of three modules
  hosts: all
  gather_facts: false
  tasks:
    - name: A command
      ansible.builtin.command: "true"
      changed_when: false

    - name: A stat
      ansible.builtin.stat:
        path: /

    - name: A file
      ansible.builtin.file:
        path: /
        state: directory
      check_mode: true
"""


def _payloads(tmp_path, cache: str) -> subprocess.CompletedProcess[str]:
    inventory = _local_inventory(tmp_path, ["node"])
    (tmp_path / "modules.yml").write_text(MODULES_PLAY)
    done = run_playbook("-i", inventory, tmp_path / "modules.yml", "-vvv", FLEET_PAYLOAD_CACHE=cache)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _built(cache) -> dict[str, int]:
    """payload file -> its modification time, under every folder of module sources in `cache`."""
    return {str(p.relative_to(cache)): p.stat().st_mtime_ns for p in cache.glob("*/*")
            if not p.name.endswith((".lock", "-part", ".bytecode"))}  # fmt: skip


def test_each_modules_payload_is_built_once_across_runs_in_the_folder_of_its_sources(tmp_path):
    """The first run builds the payloads of its three modules into the shared folder, and each gets
    its bytecode when the next task starts; the second run builds none and adds the last one's
    bytecode; a third touches none; with payload_cache empty, the run keeps its own."""
    cache = tmp_path / "payloads"
    said = _payloads(tmp_path, str(cache)).stdout
    first = _built(cache)
    assert f"fleet_warm: module payloads kept in {cache}/" in said
    assert sorted(name.split("/")[1] for name in first) == [
        "ansible.modules.command-ZIP_DEFLATED-none", "ansible.modules.file-ZIP_DEFLATED-none",
        "ansible.modules.stat-ZIP_DEFLATED-none"], first  # fmt: skip
    assert len({name.split("/")[0] for name in first}) == 1, first  # one folder of module sources
    # The payloads of the first two tasks got their bytecode as the next task started; the last
    # one's in the next run.
    assert sorted(p.name for p in cache.glob("*/*.bytecode")) == [
        "ansible.modules.command-ZIP_DEFLATED-none.bytecode",
        "ansible.modules.stat-ZIP_DEFLATED-none.bytecode",
    ]
    assert "fleet_warm: bytecode added to 1 module payloads" in _payloads(tmp_path, str(cache)).stdout
    second = _built(cache)
    assert second.keys() == first.keys()
    assert "fleet_warm: bytecode added to 0 module payloads" in _payloads(tmp_path, str(cache)).stdout
    assert _built(cache) == second
    assert "module payloads kept in" not in _payloads(tmp_path, "").stdout


def test_a_local_module_does_not_inherit_pythonunbuffered(tmp_path):
    """With PYTHONUNBUFFERED in the controller's environment, a module of a local host (and what it
    runs) has none: its Python reads its payload from a buffered standard input."""
    inventory = _local_inventory(tmp_path, ["node"])
    (tmp_path / "env.yml").write_text(ENV_PLAY)
    done = run_playbook("-i", inventory, tmp_path / "env.yml", PYTHONUNBUFFERED="1", FLEET_PROBE="here")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "FLEET_PROBE=here" in done.stdout  # the module's environment, printed
    assert "PYTHONUNBUFFERED" not in done.stdout


ENV_PLAY = """
- name: A module's environment
  hosts: all
  gather_facts: false
  tasks:
    - name: Its environment
      ansible.builtin.command: env
      register: fleet_env
      changed_when: false

    - name: Print it
      ansible.builtin.debug:
        var: fleet_env.stdout_lines
"""


def _module_utils_file(payload: Path, tmp_path: Path, python: str) -> str:
    """The file `python` imports ansible.module_utils.basic from, out of the payload's zip."""
    zipped = tmp_path / "payload.zip"
    with payload.open("rb") as cached:
        zipped.write_bytes(base64.b64decode(pickle.load(cached).zip_data))
    probe = f"import sys; sys.path[:0] = [{str(zipped)!r}]; import ansible.module_utils.basic as m; print(m.__file__)"
    done = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_host_of_the_controllers_python_imports_the_payloads_bytecode_and_another_its_source(tmp_path):
    """After a second run, the stat module's payload holds a .pyc beside each .py: the controller's
    Python imports module_utils from the bytecode, Python 3.9 (a Debian 11 host's) from the source,
    and each file's bytecode carries its source's hash, to be checked against it on the host."""
    cache = tmp_path / "payloads"
    _payloads(tmp_path, str(cache))
    _payloads(tmp_path, str(cache))
    (payload,) = cache.glob("*/ansible.modules.stat-ZIP_DEFLATED-none")
    with payload.open("rb") as cached:
        archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(pickle.load(cached).zip_data)))
    sources = [n for n in archive.namelist() if n.endswith(".py")]
    assert "ansible/module_utils/basic.py" in sources
    assert {n + "c" for n in sources} <= set(archive.namelist())
    for name in sources:  # the pyc header: this Python's magic, hash-based and checked, the source's hash
        header = archive.read(name + "c")[:16]
        assert header == importlib.util.MAGIC_NUMBER + b"\3\0\0\0" + importlib.util.source_hash(archive.read(name))
    assert _module_utils_file(payload, tmp_path, sys.executable).endswith("ansible/module_utils/basic.pyc")
    debian11 = str(other_python("3.9"))  # skips where there is none, but in CI
    assert _module_utils_file(payload, tmp_path, debian11).endswith("ansible/module_utils/basic.py")


def test_the_folder_of_module_sources_changes_with_a_module_utils_file(tmp_path, monkeypatch):
    """A module_utils file the configuration names, written again with other bytes, gives another
    folder: a payload is never taken from a folder built from other sources."""
    spec = importlib.util.spec_from_file_location("fleet_warm", ROOT / "callback_plugins" / "fleet_warm.py")
    warm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(warm)
    utils = tmp_path / "module_utils"
    utils.mkdir()
    (utils / "mine.py").write_text("A = 1\n")
    monkeypatch.setattr(warm.C, "DEFAULT_MODULE_UTILS_PATH", [str(utils)])
    before = warm.module_sources()
    assert warm.module_sources() == before
    (utils / "mine.py").write_text("A = 22\n")
    assert warm.module_sources() != before
