"""The tables a host's input check derives from the project's files: every role's documented
options (argument specs), its literal defaults, the variables roles set themselves, and the fleet_*
names. Made at build and test time (`make setup`, `make test`: python -m ftdomain.inputs.derived),
kept in .cache/fleet-inputs.json with the signature of the files they came from; a check reads that
file when the signature still holds and derives the tables itself when it does not, never writing."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from ftdomain.inputs.common import PROJECT, read_yaml

# Ansible runs each host's check in a worker of its own, so a per-process cache starts empty on
# every host, and parsing the roles' YAML each time cost more than the check (docs/performance.md,
# "A thousand hosts"): the tables are kept on disk.
SOURCES = ("roles/*/meta/argument_specs.yml", "roles/*/defaults/main.yml", "roles/*/tasks/*.yml",
           "group_vars/all/fleet.yml", "docs/variables.md")  # fmt: skip


DERIVED = PROJECT / ".cache" / "fleet-inputs.json"


def _read_specs() -> dict[str, list]:
    specs = {}
    for path in sorted(PROJECT.glob("roles/*/meta/argument_specs.yml")):
        role = path.parent.parent.name
        entry_points = read_yaml(path)["argument_specs"]  # main first: an option it declares wins
        for entry in sorted(entry_points, key=lambda entry: entry != "main"):
            for name, spec in (entry_points[entry].get("options") or {}).items():
                specs.setdefault(name, [role, {k: v for k, v in spec.items() if k in ("type", "choices", "elements")}])
    return specs


# A default that is one of role fleet_shared's values ("{{ fleet_shared_ports.triton_http }}"):
# the value, as Ansible would template it.
_SHARED = re.compile(r"^\{\{\s*(fleet_shared_[a-z0-9_]+)(?:\.([a-z0-9_]+))?\s*\}\}$")


def _read_defaults() -> dict[str, Any]:
    values, shared = {}, {}
    for path in sorted(PROJECT.glob("roles/*/defaults/main.yml")):
        for name, value in (read_yaml(path) or {}).items():
            if "{{" not in str(value):
                values[name] = value
            elif match := _SHARED.match(str(value).strip()):
                shared[name] = match.groups()
    for name, (source, key) in shared.items():
        if source in values:
            values[name] = values[source][key] if key else values[source]
    return values


def _read_outputs() -> list[str]:
    names = set()
    for path in PROJECT.glob("roles/*/tasks/*.yml"):
        text = path.read_text()
        names.update(re.findall(r"^\s+register:\s+([a-z][a-z0-9_]*)", text, re.MULTILINE))
        # container_image sets the fact its caller names (ft_image_built, triton_image_built).
        names.update(re.findall(r"^\s+container_image_fact:\s+([a-z][a-z0-9_]*)", text, re.MULTILINE))
        for block in re.findall(r"set_fact:\n((?:\s{4,}.*\n)+)", text):
            names.update(re.findall(r"^\s{4}([a-z][a-z0-9_]*):", block, re.MULTILINE))
    return sorted(names)


def _read_fleet_names() -> list[str]:
    names = set(read_yaml(PROJECT / "group_vars/all/fleet.yml"))
    names.update(re.findall(r"\bfleet_[a-z_]+[a-z]\b", (PROJECT / "docs/variables.md").read_text()))
    return sorted(names)


def signature() -> str:
    """What the tables are made from: the sources' names, sizes and times."""
    files = sorted(path for pattern in SOURCES for path in PROJECT.glob(pattern))
    stamp = [(str(path.relative_to(PROJECT)), st.st_mtime_ns, st.st_size) for path in files for st in [path.stat()]]
    return hashlib.sha256(json.dumps(stamp).encode()).hexdigest()


def derive(made_from: str | None = None) -> dict[str, Any]:
    """The four tables, read afresh from the project's files (`made_from`: their signature() when
    the caller has just computed it)."""
    return {"signature": made_from or signature(), "specs": _read_specs(), "defaults": _read_defaults(),
            "outputs": _read_outputs(), "fleet": _read_fleet_names()}  # fmt: skip


def write(path: Path = DERIVED) -> dict[str, Any]:
    """Derive the tables and keep them in `path` (make setup and the tests do; a check never writes)."""
    tables = derive()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(tables))
    partial.replace(path)
    return tables


@functools.cache
def tables() -> dict[str, Any]:
    """The tables from DERIVED when it was made from the same files as are there now, else derived
    in this process from the files (correct, only slower: each worker derives them again)."""
    try:
        kept = json.loads(DERIVED.read_text())
    except (OSError, ValueError):
        kept = {}
    now = signature()
    return kept if kept.get("signature") == now else derive(now)


@functools.cache
def role_specs() -> dict[str, tuple[str, dict[str, Any]]]:
    """option name -> (role, its argument spec without the documentation-only keys)."""
    return {name: (role, spec) for name, (role, spec) in tables()["specs"].items()}


def role_defaults() -> dict[str, Any]:
    """The literal defaults of every role (templated ones are left out)."""
    return tables()["defaults"]


@functools.cache
def role_outputs() -> frozenset[str]:
    """Variables the roles set themselves (set_fact, register): not inputs, never typos."""
    return frozenset(tables()["outputs"])


@functools.cache
def fleet_names() -> frozenset[str]:
    """The fleet_* inputs: group_vars/all/fleet.yml and those documented in docs/variables.md."""
    return frozenset(tables()["fleet"])


if __name__ == "__main__":
    made = write()
    print(f"{DERIVED}: {len(made['specs'])} role options, {len(made['fleet'])} fleet_* names")
