"""The project's wiring: playbooks parse against every inventory, every role has an
argument spec, and the specs really reject bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile

import pytest
import yaml
from conftest import ROOT, run_playbook

INVENTORIES = sorted(p.name for p in (ROOT / "inventories").iterdir() if p.is_dir())
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())

# A value of the wrong type for each argument-spec type that Ansible does not
# silently convert from a string (str, list and path accept almost anything).
WRONG = {"bool": "maybe", "int": "many", "float": "much", "dict": "not-a-dict"}


def test_project_has_inventories_and_roles():
    assert {"lab", "prod"} <= set(INVENTORIES)
    assert ROLES, "no roles found under roles/"


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_site_syntax_check(inventory):
    result = run_playbook("site.yml", "-i", f"inventories/{inventory}", "--syntax-check")
    assert result.returncode == 0, result.stdout + result.stderr


def _stage_roles() -> set[str]:
    """The roles of the stage playbooks that site.yml imports (playbooks/status.yml is not a stage)."""
    roles = set()
    for entry in yaml.safe_load((ROOT / "site.yml").read_text()):
        stage = ROOT / entry["ansible.builtin.import_playbook"]
        for play in yaml.safe_load(stage.read_text()):
            roles.update(r["role"] if isinstance(r, dict) else r for r in play.get("roles", []))
    return roles


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_status_playbook_lists_its_role(inventory):
    result = run_playbook("playbooks/status.yml", "-i", f"inventories/{inventory}", "--list-tasks")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fleet_status : Read the serving state of the host" in result.stdout


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_site_lists_the_tasks_of_every_stage_role(inventory):
    result = run_playbook("site.yml", "-i", f"inventories/{inventory}", "--list-tasks")
    assert result.returncode == 0, result.stdout + result.stderr
    roles = _stage_roles()
    assert roles, "no roles found in playbooks/*.yml"
    for role in roles:
        assert f"{role} : " in result.stdout, f"site.yml lists no task of role {role}"


@pytest.mark.parametrize("role", ROLES)
def test_role_has_argument_spec_for_every_default(role):
    spec_file = ROOT / "roles" / role / "meta" / "argument_specs.yml"
    assert spec_file.is_file(), f"{role}: meta/argument_specs.yml is missing"
    entry_points = yaml.safe_load(spec_file.read_text())["argument_specs"]
    options = {name: opt for entry in entry_points.values() for name, opt in (entry.get("options") or {}).items()}
    defaults_file = ROOT / "roles" / role / "defaults" / "main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text()) or {}) if defaults_file.exists() else {}
    undocumented = sorted(set(defaults) - set(options))
    assert not undocumented, f"{role}: defaults without an argument spec entry: {undocumented}"
    for name, opt in options.items():
        assert name.startswith(f"{role}_"), f"{role}: option {name} lacks the role prefix"
        assert opt.get("description"), f"{role}: option {name} has no description"
        assert "type" in opt, f"{role}: option {name} has no type"


def _bad_values(role: str) -> dict[str, object]:
    spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    bad: dict[str, object] = {}
    for name, opt in spec["argument_specs"]["main"].get("options", {}).items():
        if opt.get("choices"):
            bad[name] = "not-one-of-the-choices"
        elif opt["type"] in WRONG:
            bad[name] = WRONG[opt["type"]]
    return bad


@pytest.mark.parametrize("role", ROLES)
def test_argument_spec_rejects_wrong_types(role, playbook, tmp_path):
    bad = _bad_values(role)
    if not bad:
        pytest.skip(f"{role} has no option whose wrong type the spec can catch")
    extra = tmp_path / "bad.json"
    extra.write_text(json.dumps(bad))
    play = playbook(f"- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles: [{role}]\n")
    result = run_playbook(play, "-i", "localhost,", "--check", "-e", f"@{extra}")
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "Validating arguments against arg spec" in out
    for name in bad:
        assert name in out, f"{role}: the spec did not name {name}:\n{out}"


@pytest.mark.parametrize("where", [".", "playbooks"])
def test_top_level_group_vars_load_for_site_and_stage_playbooks(where, tmp_path):
    """group_vars/ at the top is read next to site.yml and, through the playbooks/group_vars
    link, next to the stage playbooks; an inventory's host_vars still override it."""
    inventory = tmp_path / "inv"
    (inventory / "host_vars" / "h2").mkdir(parents=True)
    (inventory / "hosts.yml").write_text("all:\n  children:\n    gpu_hosts:\n      hosts:\n        h1:\n        h2:\n")
    (inventory / "host_vars" / "h2" / "fleet.yml").write_text("fleet_data_root: /data/h2\n")
    probe = ROOT / where / f".pytest-group-vars-{where.strip('.') or 'top'}.yml"
    probe.write_text(
        "- hosts: gpu_hosts\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.debug:\n        msg: 'root={{ fleet_data_root }} tp={{ fleet_tensor_para_size }}'\n"
    )
    try:
        result = run_playbook(probe, "-i", inventory, "-e", "ansible_python_interpreter=" + sys.executable)
    finally:
        probe.unlink()
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "root=/srv/ftfleet tp=1" in out  # h1: the fleet default from group_vars/all/fleet.yml
    assert "root=/data/h2 tp=1" in out  # h2: its host_vars win


def test_prod_inventory_gives_each_host_its_model_gpus_and_ports(tmp_path):
    """The example fleet as documented (inventories/prod/README.md): model per group, tp per
    host from its GPU list, ports per host, the top-level fleet defaults underneath, and the
    example vault (password ftfleet-example) holding a placeholder token for the gated model only."""
    password = tmp_path / "vault-password"
    password.write_text("ftfleet-example\n")
    probe = ROOT / ".pytest-prod-inventory.yml"
    probe.write_text(
        "- hosts: gpu_hosts\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.debug:\n        msg: >-\n"
        "          PROBE {{ inventory_hostname }} {{ fleet_model.name }} tp={{ fleet_tensor_para_size }}\n"
        "          shards={{ '/m' | ft_shard_dir(fleet_tensor_para_size) }} root={{ fleet_data_root }}\n"
        "          http={{ triton_server_http_port | default(8000) }} token={{ fleet_hf_token[:11] or 'none' }}\n"
        "          on={{ fleet_machine }}:{{ fleet_gpu_devices | join(',') }}\n"
    )
    try:
        result = run_playbook(
            probe, "-i", "inventories/prod", "--vault-password-file", password,
            "-e", "ansible_python_interpreter=" + sys.executable, ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        )  # fmt: skip
    finally:
        probe.unlink()
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    probes = [line.split("PROBE ", 1)[1] for line in out.splitlines() if "PROBE " in line]
    lines = sorted(" ".join(probe.split()).rstrip('"') for probe in probes)
    assert lines == [
        "gpu-a100-01.example.com kogpt tp=1 shards=/m/fastertransformer/1/1-gpu root=/srv/ftfleet http=8000 token=none"
        " on=gpu-a100-01.example.com:0",
        "gpu-a100-08.example.com kogpt tp=8 shards=/m/fastertransformer/1/8-gpu root=/srv/ftfleet http=8000 token=none"
        " on=gpu-a100-08.example.com:0,1,2,3,4,5,6,7",
        "gpu-l40s-04.example.com llama-7b tp=2 shards=/m/fastertransformer/1/2-gpu root=/srv/ftfleet http=8100 "
        "token=hf_EXAMPLE_ on=gpu-l40s-04.example.com:0,1",
        # the machine's second model: its own GPUs, tp and ports (docs/placement.md)
        "h2ogpt.gpu-l40s-04.example.com h2ogpt tp=2 shards=/m/fastertransformer/1/2-gpu root=/srv/ftfleet http=8200 "
        "token=none on=gpu-l40s-04.example.com:2,3",
    ], out


def test_the_docs_table_of_pythons_is_the_checks_own():
    """docs/testing.md's table of places and Pythons is what scripts/check-pythons checks."""
    import subprocess  # noqa: PLC0415

    table = subprocess.run([sys.executable, str(ROOT / "scripts" / "check-pythons"), "--table"], capture_output=True,
                           text=True, check=True).stdout.strip()  # fmt: skip
    assert table in (ROOT / "docs" / "testing.md").read_text()


def test_molecule_runs_ansible_with_the_projects_settings():
    """Molecule writes its own ansible.cfg: each setting the scenarios take over from the
    project's (.config/molecule/config.yml, config_options) has ansible.cfg's value."""
    import configparser  # noqa: PLC0415

    project = configparser.ConfigParser()
    project.read(ROOT / "ansible.cfg")
    molecule = yaml.safe_load((ROOT / ".config" / "molecule" / "config.yml").read_text())
    options = molecule["provisioner"]["config_options"]
    assert options["defaults"], options
    for section, settings in options.items():
        for key, value in settings.items():
            assert project.get(section, key, fallback=None) == str(value), f"[{section}] {key}: {value!r}"


def test_prods_monitoring_host_reaches_every_tritonservers_metrics(tmp_path):
    """inventories/prod's Prometheus (mon-01) scrapes <gpu host>:<metrics port> from its own
    address: tritonserver's metrics port is published on every address while its HTTP and gRPC
    ports stay on loopback behind the gateway (all three were on 127.0.0.1 until 2026-11-25:
    up{job="triton"} would have been 0 on every GPU host and FleetModelDown firing for every model),
    and the gateways listen on every address. The triton_server role's own variables, for each host."""
    password = tmp_path / "vault-password"
    password.write_text("ftfleet-example\n")
    probe = ROOT / ".pytest-prod-publish.yml"
    probe.write_text(
        "- hosts: gpu_hosts\n  connection: local\n  gather_facts: false\n  roles: [triton_server]\n  tasks:\n"
        "    - ansible.builtin.debug:\n"
        '        msg: "PROBE {{ inventory_hostname }} {{ triton_server_metrics_port }} {{ gateway_bind_address\n'
        "          | default('0.0.0.0') }} {{ __triton_server_publish | join(' ') }} {{ groups.monitoring_hosts }}\"\n"
        "      tags: [probe]\n"
    )
    try:  # --tags probe: the role's variables load, its tasks do not run
        result = run_playbook(probe, "-i", "inventories/prod", "--vault-password-file", password, "--tags", "probe",
                              "-e", "ansible_python_interpreter=" + sys.executable,
                              ANSIBLE_CALLBACK_RESULT_FORMAT="json")  # fmt: skip
    finally:
        probe.unlink()
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    lines = [line.split("PROBE ", 1)[1].strip().strip('"') for line in out.splitlines() if "PROBE " in line]
    probes = [line.split(" ", 3) for line in lines]
    assert len(probes) == 4, out  # with the L40S machine's second model (its own metrics port)
    for host, metrics_port, gateway_bind, rest in probes:
        published, monitors = rest.split(" [")
        assert "'mon-01.example.com'" in monitors
        by_container = {p.rsplit(":", 1)[1]: p.rsplit(":", 1)[0] for p in published.split()}
        assert by_container["8002"] == metrics_port, (host, published)  # every address: no bind before the port
        assert by_container["8000"].startswith("127.0.0.1:"), (host, published)
        assert by_container["8001"].startswith("127.0.0.1:"), (host, published)
        assert gateway_bind == "0.0.0.0", host


def test_the_converters_zip_holds_ftnative_and_ftdomain_ft_only(tmp_path):
    """roles/ft_convert/files/pack-tools packs the packages the hosts run: ftnative and the
    FasterTransformer facts it reads (ftdomain.ft), importable from the zip alone; a change to the
    controller's part of ftdomain (the canary's) leaves the zip, and every host's copy of it, byte for
    byte as it was; a change to what the hosts run does not."""
    project = tmp_path / "project"
    for part in ("ftnative", "ftdomain"):
        shutil.copytree(ROOT / part, project / part, ignore=shutil.ignore_patterns("__pycache__"))

    def pack(name: str) -> bytes:
        out = tmp_path / name
        subprocess.run([sys.executable, str(ROOT / "roles/ft_convert/files/pack-tools"), str(project), str(out)],
                       check=True, capture_output=True)  # fmt: skip
        return out.read_bytes()

    first = pack("first.zip")
    names = zipfile.ZipFile(tmp_path / "first.zip").namelist()
    domain = sorted(n for n in names if n.startswith("ftdomain/"))
    assert domain == sorted(["ftdomain/__init__.py", "ftdomain/errors.py",
                             *(f"ftdomain/ft/{p.name}" for p in (ROOT / "ftdomain/ft").glob("*.py"))])  # fmt: skip
    assert {f"ftnative/{p.name}" for p in (ROOT / "ftnative").glob("*.py")} <= set(names)
    # from the zip alone (-S: no site-packages, where the project's own editable install would answer)
    probe = "import ftdomain.ft.layout, ftdomain.ft.model, ftdomain.ft.families as f; print(sorted(f.FAMILIES))"
    done = subprocess.run([sys.executable, "-S", "-c", probe], env={"PYTHONPATH": str(tmp_path / "first.zip")},
                          cwd=tmp_path, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['bloom',", "'gpt',", "'gptj',", "'gptneox',", "'llama']"]
    with (project / "ftdomain" / "fleet" / "canary.py").open("a") as f:
        f.write("\n# another line\n")
    assert pack("second.zip") == first
    with (project / "ftdomain" / "ft" / "layout.py").open("a") as f:
        f.write("\n# another line\n")
    assert pack("third.zip") != first
