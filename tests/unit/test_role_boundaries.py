"""Role boundaries, as a lint: a role's private variables (`__<role>_*`) are read inside that role
only, another role's task files are reached only through the entry points its
meta/argument_specs.yml declares (documented, validated), and no role copies a value another
role owns as a literal fallback (`<other role>_<name> | default(8001)`: role fleet_shared keeps
such values once). What roles share, they publish as
documented facts (docs/architecture.md, "Roles and what they publish"). Tests may look inside
roles; product code (site.yml, playbooks/, roles/, benchmarks/, lab/, inventories/, group_vars/)
may not."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

PRODUCT = ("site.yml", "playbooks", "roles", "benchmarks", "lab", "inventories", "group_vars")
SUFFIXES = (".yml", ".yaml", ".j2", ".py", ".cfg")


def _files(root: Path):
    for top in PRODUCT:
        base = root / top
        paths = [base] if base.is_file() else sorted(base.rglob("*")) if base.is_dir() else []
        for path in paths:
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                yield path


def _owner(root: Path, path: Path) -> str | None:
    parts = path.relative_to(root).parts
    return parts[1] if parts[0] == "roles" and len(parts) > 2 else None


def private_reads(root: Path) -> list[str]:
    """`__<role>_name` used outside roles/<role>/, as 'file: name'."""
    roles = sorted((p.name for p in (root / "roles").iterdir() if p.is_dir()), key=len, reverse=True)
    pattern = re.compile(r"\b__(" + "|".join(map(re.escape, roles)) + r")_[a-z0-9_]+")
    found = []
    for path in _files(root):
        owner = _owner(root, path)
        for match in pattern.finditer(path.read_text(errors="replace")):
            if match[1] != owner:
                found.append(f"{path.relative_to(root)}: {match[0]}")
    return sorted(set(found))


# A fallback that says "not there" is no copy of a value: '' , "", false, true, [], {}, none.
ABSENT = {"''", '""', "false", "true", "[]", "{}", "none", "None", "omit"}


def literal_fallbacks(root: Path) -> list[str]:
    """`<other role>_<name> | default(<literal>)`: a value another role owns, copied where it is
    read (a port, a path, a size) instead of read from one place (role fleet_shared's defaults, or the
    owner's published fact), as 'file: expression'."""
    roles = sorted((p.name for p in (root / "roles").iterdir() if p.is_dir()), key=len, reverse=True)
    pattern = re.compile(r"\b((" + "|".join(map(re.escape, roles)) + r")_[a-z0-9_]+)\s*\|\s*default\(\s*([^),]*)")
    literal = re.compile(r"^(-?\d+(\.\d+)?|'[^']*'|\"[^\"]*\")$")
    found = []
    for path in _files(root):
        owner = _owner(root, path)
        for match in pattern.finditer(path.read_text(errors="replace")):
            value = match[3].strip()
            if match[2] != owner and literal.match(value) and value not in ABSENT:
                found.append(f"{path.relative_to(root)}: {match[1]} | default({value})")
    return sorted(set(found))


def _calls(node):
    """Every import_role/include_role mapping in a YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key.split(".")[-1] in ("import_role", "include_role") and isinstance(value, dict):
                yield value
            yield from _calls(value)
    elif isinstance(node, list):
        for item in node:
            yield from _calls(item)


def _entry_points(root: Path, role: str) -> set[str]:
    spec = root / "roles" / role / "meta" / "argument_specs.yml"
    if not spec.is_file():
        return set()
    return set((yaml.safe_load(spec.read_text()) or {}).get("argument_specs") or {})


def undeclared_entries(root: Path) -> list[str]:
    """tasks_from into another role that its argument specs do not declare, as 'file: role/tasks_from'."""
    found = []
    for path in _files(root):
        if path.suffix not in (".yml", ".yaml") or "templates" in path.parts:
            continue
        try:
            document = yaml.safe_load(path.read_text())
        except yaml.YAMLError:
            continue  # not Ansible YAML (yamllint judges the files themselves)
        for call in _calls(document):
            role, entry = str(call.get("name", "")), call.get("tasks_from")
            if entry is None or role == _owner(root, path) or "{{" in role:
                continue
            if str(entry).removesuffix(".yml") not in _entry_points(root, role):
                found.append(f"{path.relative_to(root)}: {role}/{entry}")
    return sorted(found)


def test_no_role_reads_another_roles_private_variables():
    assert private_reads(ROOT) == []


def test_no_role_copies_a_value_another_role_owns():
    assert literal_fallbacks(ROOT) == []


def test_other_roles_are_entered_only_where_their_argument_specs_say():
    assert undeclared_entries(ROOT) == []


def test_the_lint_finds_a_private_read_and_an_undeclared_entry(tmp_path):
    for role in ("alpha", "beta"):
        (tmp_path / "roles" / role / "tasks").mkdir(parents=True)
        (tmp_path / "roles" / role / "meta").mkdir()
        (tmp_path / "roles" / role / "meta" / "argument_specs.yml").write_text(
            "argument_specs:\n  main: {options: {}}\n  shared: {options: {}}\n"
        )
    (tmp_path / "roles" / "alpha" / "tasks" / "main.yml").write_text(
        "- ansible.builtin.debug: {msg: '{{ __alpha_own }} {{ __beta_secret }}'}\n"
        "- ansible.builtin.import_role: {name: beta, tasks_from: shared}\n"
        "- ansible.builtin.include_role: {name: beta, tasks_from: inner}\n"
        "- ansible.builtin.import_role: {name: alpha, tasks_from: anything}\n"
    )
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "play.yml").write_text(
        "- hosts: all\n  tasks:\n    - import_role: {name: alpha, tasks_from: helper.yml}\n"
    )
    (tmp_path / "roles" / "alpha" / "defaults").mkdir()
    (tmp_path / "roles" / "alpha" / "defaults" / "main.yml").write_text(
        'alpha_port: "{{ beta_port | default(8001) }}"\nalpha_sock: "{{ beta_socket | default(\'/run/x.sock\') }}"\n'
        'alpha_ok: "{{ beta_facts | default([]) }}"\nalpha_fleet: "{{ beta_dir | default(fleet_dir) }}"\n'
        'alpha_own: "{{ alpha_x | default(3) }}"\n'
    )
    copies = ["beta_port | default(8001)", "beta_socket | default('/run/x.sock')"]
    assert literal_fallbacks(tmp_path) == [f"roles/alpha/defaults/main.yml: {copy}" for copy in copies]
    assert private_reads(tmp_path) == ["roles/alpha/tasks/main.yml: __beta_secret"]
    assert undeclared_entries(tmp_path) == [
        "playbooks/play.yml: alpha/helper.yml",
        "roles/alpha/tasks/main.yml: beta/inner",
    ]
