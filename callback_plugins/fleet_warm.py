"""Warm the controller before its workers fork: the filter and test plugins loaded once, and each
module's AnsiballZ payload built once across runs instead of once in every run.

Plugins. Ansible runs each task on each host in a worker process forked from the controller. The
first time a worker templates an expression that names a filter or a test (`x | length`, `x is
defined`), Ansible imports every filter and test plugin file it can see (ansible-core's and this
project's filter_plugins/, 17 files) to build its table of names; the controller itself never
does, so no worker inherits that table and every worker builds it again: on this project's 2-core
machines, about 10 ms of CPU per task and host, which is most of what a task such as `assert:
that: x | length == 0` costs beyond a plain `set_fact` (docs/performance.md, "A thousand hosts").
This callback builds the table in the controller at the start of each play (a second call finds it
built and returns at once), so that every worker forked after it inherits it. Ansible clears the
table itself when a directory of plugins is added later (a role's own filter_plugins/, say), and
the workers then build it as before: never a stale table.

Payloads. Before a module first runs, Ansible builds its payload (the module and every
module_utils file it imports, found by parsing each one, zipped): about 0.13 s of CPU per module on
this project's machines. It keeps the payload in a folder of the run's own temporary directory, so
every run builds each of its modules again (a site.yml run about 20 of them; the tests run
ansible-playbook over a thousand times). This callback makes that folder a link to one kept per
set of module sources (`payload_cache`, below): ansible-core's version and the stat of each of its
module and module_utils files, each installed collection's MANIFEST.json, the Python's version, and
the module and module_utils folders the configuration names. A change to any of them is another
folder; an edit inside an installed collection without reinstalling it is not seen (empty the
folder then). Ansible's own lock and rename keep concurrent runs from reading a partial payload.
An empty `payload_cache` turns this off.

Bytecode. On the host, a module's Python imports the payload's module_utils from the zip, and
Python compiles a file it imports from a zip every time (it writes no bytecode there): about 45 ms
of CPU per module and host (`ansible.module_utils.basic` and what it imports, 100 ms to import
against 55 ms from bytecode). At the start of each run and of each task, this callback adds to each
payload built before (by an earlier run or task) the bytecode of each of its Python files, compiled
by the controller's Python, in the zip beside the source (hash-checked: Python uses it only while
it matches the source beside it). A host whose Python is the controller's version (the lab's and
the tests' Debian 12 hosts, 3.11) imports the bytecode; any other Python finds a version it does
not read and compiles the source as before. A payload gets its bytecode once (a marker file beside
it says so), written to a temporary file and renamed over the old one, so a run that reads it
meanwhile reads either.

Local modules. A module on a host of the local connection (the controller itself: preflight's
checks, the tests' hosts) is a Python that reads its payload from its standard input, and with
PYTHONUNBUFFERED set (it is on this project's test machines, for their logs) Python reads that
input one byte per system call: about 180,000 calls for a payload of 130 kB, 25 ms of CPU per
module (67 ms with its bytecode, 360 kB). Modules write their result once, at their end, so
buffering costs them nothing: this callback removes PYTHONUNBUFFERED from the controller's
environment at the start of the run, before it forks a worker, so that no module inherits it (the
controller's own output stays as it started).

Enabled by ansible.cfg (callbacks_enabled), ftfleet, scripts/scale-bench and Molecule's
configuration, which also point Ansible at this folder (ansible-runner and Molecule replace
ansible.cfg's callback_plugins path with their own).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.util
import io
import marshal
import os
import pickle
import sys
import tempfile
import zipfile
from pathlib import Path

import ansible
import ansible.constants as C
from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader
from ansible.release import __version__ as ANSIBLE_VERSION

DOCUMENTATION = r"""
name: fleet_warm
type: aggregate
short_description: Load the filter and test plugins once, and build each module's payload once
description:
  - At the start of each play, loads every Jinja filter and test plugin the run can see, in the
    controller, so that the workers it forks for each task and host inherit them instead of each
    importing every plugin file again.
  - At the start of the run, points Ansible's folder of built module payloads (AnsiballZ) at one
    kept across runs for the same module sources, so that a run builds only the payloads no earlier
    run built, and, at the start of the run and of each task, adds to each payload built before
    the bytecode of its Python files, so that a host with the controller's Python version does
    not compile them each time.
  - At the start of the run, removes PYTHONUNBUFFERED from the environment the workers and the
    modules of local hosts inherit (with it, a module's Python reads its payload one byte per
    system call).
requirements:
  - enabled in callbacks_enabled (ansible.cfg does), and this folder in callback_plugins
options:
  payload_cache:
    description:
      - The folder under which the payloads are kept, one folder per set of module sources. Empty
        turns the shared payloads off (each run builds its own, as Ansible does).
    default: ~/.cache/ftfleet/ansiballz
    type: str
    env:
      - name: FLEET_PAYLOAD_CACHE
    ini:
      - section: callback_fleet_warm
        key: payload_cache
"""


def module_sources() -> str:
    """A digest of what a module's payload is built from: ansible-core's version and its modules
    and module_utils (each file's size and time), each installed collection's MANIFEST.json, the
    folders of modules and module_utils the configuration adds, and the Python's version."""
    seen = [ANSIBLE_VERSION, sys.version]
    core = Path(ansible.__file__).parent
    folders = [core / "modules", core / "module_utils"]
    for configured in (C.DEFAULT_MODULE_PATH, C.DEFAULT_MODULE_UTILS_PATH):
        folders += [Path(folder) for folder in configured or []]
    for folder in folders:
        for parent, _dirs, files in os.walk(folder):
            for name in sorted(files):
                stat = os.stat(os.path.join(parent, name))
                seen.append(f"{parent}/{name} {stat.st_size} {stat.st_mtime_ns}")
    roots = [*sys.path, *(C.COLLECTIONS_PATHS or [])]
    for root in dict.fromkeys(roots):
        for manifest in sorted(Path(root).glob("ansible_collections/*/*/MANIFEST.json")):
            stat = manifest.stat()
            seen.append(f"{manifest} {stat.st_size} {stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(seen).encode()).hexdigest()[:16]


def share_payloads(cache: str) -> Path | None:
    """Link this run's folder of built payloads to `cache`/<module sources>; None when the run
    keeps its own (no cache, or Ansible built a payload already)."""
    if not cache:
        return None
    run_folder = Path(C.DEFAULT_LOCAL_TMP) / "ansiballz_cache"
    if os.path.lexists(run_folder):
        return None
    shared = Path(cache).expanduser() / module_sources()
    shared.mkdir(mode=0o700, parents=True, exist_ok=True)
    run_folder.symlink_to(shared, target_is_directory=True)
    return shared


BYTECODE_MARK = ".bytecode"  # beside a payload: its bytecode was added
# The other files in the folder: a build's lock, a file written before its rename (Ansible's and
# add_bytecode's), the marks.
NOT_PAYLOADS = (".lock", "-part", BYTECODE_MARK)


def with_bytecode(zip_data: bytes) -> bytes:
    """A payload's base64 zip with a hash-checked .pyc of this Python beside each .py file: zipimport
    takes a .pyc first where its version is the host Python's and its hash matches the source."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(base64.b64decode(zip_data))) as source,
        zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as payload,
    ):
        names = set(source.namelist())
        for info in source.infolist():
            data = source.read(info)
            payload.writestr(info, data)
            if not info.filename.endswith(".py") or info.filename + "c" in names:
                continue
            try:
                code = compile(data, info.filename, "exec", dont_inherit=True)
            except (SyntaxError, ValueError):  # not this Python's syntax: the host compiles it, if it can
                continue
            header = importlib.util.MAGIC_NUMBER + (0b11).to_bytes(4, "little") + importlib.util.source_hash(data)
            compiled = zipfile.ZipInfo(info.filename + "c", date_time=info.date_time)
            compiled.compress_type = zipfile.ZIP_DEFLATED
            payload.writestr(compiled, header + marshal.dumps(code))
    return base64.b64encode(out.getvalue())


def add_bytecode(folder: Path) -> int:
    """Add bytecode to each payload in `folder` that has none yet; how many got it."""
    added = 0
    for path in sorted(folder.iterdir()):
        mark = path.with_name(path.name + BYTECODE_MARK)
        if path.name.endswith(NOT_PAYLOADS) or not path.is_file() or mark.exists():
            continue
        with path.open("rb") as cached:
            payload = pickle.load(cached)  # Ansible's own cache file (module_common._CachedModule)
        payload = dataclasses.replace(payload, zip_data=with_bytecode(payload.zip_data))
        handle, temporary = tempfile.mkstemp(dir=folder, suffix="-part")
        with os.fdopen(handle, "wb") as written:
            pickle.dump(payload, written)
        os.replace(temporary, path)
        mark.touch()
        added += 1
    return added


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fleet_warm"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._shared: Path | None = None  # the run's shared folder of payloads, while bytecode goes in

    def v2_playbook_on_start(self, playbook: object) -> None:
        os.environ.pop("PYTHONUNBUFFERED", None)  # for the modules the workers start (above)
        try:
            self._shared = share_payloads(self.get_option("payload_cache"))
        except OSError as error:  # a folder it may not write: the run builds its own payloads
            self._display.warning(f"fleet_warm: module payloads are not shared across runs: {error}")
        else:
            if self._shared:
                self._display.vvv(f"fleet_warm: module payloads kept in {self._shared}")
                self._add_bytecode(always_say=True)

    def _add_bytecode(self, always_say: bool = False) -> None:
        """Bytecode into the payloads built since (at a task's start: those of the tasks before)."""
        if not self._shared:
            return
        try:
            added = add_bytecode(self._shared)
        except Exception as error:  # Ansible's private cache format: never fail a run on it
            self._display.warning(f"fleet_warm: no bytecode added to the module payloads: {error!r}")
            self._shared = None
        else:
            if added or always_say:
                self._display.vvv(f"fleet_warm: bytecode added to {added} module payloads")

    def v2_playbook_on_task_start(self, task: object, is_conditional: bool) -> None:
        self._add_bytecode()

    def v2_playbook_on_handler_task_start(self, task: object) -> None:
        self._add_bytecode()

    def v2_playbook_on_play_start(self, play: object) -> None:
        for loader in (filter_loader, test_loader):
            for _plugin in loader.all():  # builds the loader's table of names, once
                pass
