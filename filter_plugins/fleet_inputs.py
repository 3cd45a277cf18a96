"""Every input a later stage relies on, checked at once: the problems of one host's settings."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_input_problems
short_description: Every problem of a host's inputs (fleet_* and role variables), as sentences
description:
  - Takes the variables defined for a host whose names carry the fleet_ prefix or a role's
    prefix (what the inventory, group_vars and extra vars set), and returns a list of problems,
    each naming the variable, its value, what is wrong and the fix. An empty list means the
    inputs are usable. Never raises for a bad input.
  - Checks each role variable against its role's meta/argument_specs.yml (type, choices,
    element type) and flags names with a role's prefix that no role documents (typos); checks
    fleet_* variables (types, absolute and safe paths, GPU list, parallel sizes, container
    versions, engine); numbers within their ranges (ports, timeouts, batch sizes, int8 modes),
    constraints across variables (distinct ports, the converter's and the tuner's tp equal the
    serving tp, batching modes, int8 with the family and data type), and, given the host's GPUs,
    that the CUDA of the containers that build FT can build for their architecture and that bf16
    runs on them.
  - Values a variable does not set come from its role's defaults/main.yml where that is a
    literal (templated defaults follow the fleet_* inputs checked here).
options:
  _input:
    description: Variable name -> value, for the host.
    type: dict
    required: true
  gpus:
    description: The host's ansible_local.gpus fact (role gpu_facts); GPU checks are skipped without it.
    type: dict
"""

EXAMPLES = r"""
- name: Collect the problems of the host's inputs
  ansible.builtin.set_fact:
    problems: "{{ provided | fleet_input_problems(ansible_local.gpus | default({})) }}"
"""

RETURN = r"""
_value:
  description: Problems, each "variable=value - what is wrong; fix - what to do" (empty when all is well).
  type: list
  elements: str
"""

import difflib
import functools
import hashlib
import ipaddress
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # Ansible loads plugins by path; the registry is a sibling module
    sys.path.insert(0, _HERE)
import yaml
from cuda_compat import container_sms, cuda_sm
from fleet_model import SAFE_NAME, fleet_model_problems, fleet_model_resolved
from ft_families import FAMILIES, AnsibleFilterError
from gateway import gateway_probe_key, key_expiry
from monitoring import monitoring_input_problems

PROJECT = Path(_HERE).parent
SAFE_PATH = re.compile(r"/[A-Za-z0-9._/+-]*")


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _yaml(path: Path) -> Any:
    """A YAML file through libyaml where PyYAML has it: Ansible forks a worker per host and task,
    so every host's check reads these files afresh (pure-Python parsing took 3.6 s of 4.2 per host;
    docs/performance.md, "A thousand hosts")."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


# What every host's check derives from the project's files, kept in a JSON file beside them:
# Ansible runs each host's check in a worker of its own, so a per-process cache starts empty on
# every host, and parsing the roles' YAML each time cost more than the check (docs/performance.md,
# "A thousand hosts").
SOURCES = ("roles/*/meta/argument_specs.yml", "roles/*/defaults/main.yml", "roles/*/tasks/*.yml",
           "group_vars/all/fleet.yml", "docs/variables.md")  # fmt: skip
DERIVED = PROJECT / ".cache" / "fleet-inputs.json"


def _read_specs() -> dict[str, list]:
    specs = {}
    for path in sorted(PROJECT.glob("roles/*/meta/argument_specs.yml")):
        role = path.parent.parent.name
        options = _yaml(path)["argument_specs"]["main"].get("options") or {}
        for name, spec in options.items():
            specs[name] = [role, {k: v for k, v in spec.items() if k in ("type", "choices", "elements")}]
    return specs


def _read_defaults() -> dict[str, Any]:
    values = {}
    for path in sorted(PROJECT.glob("roles/*/defaults/main.yml")):
        for name, value in (_yaml(path) or {}).items():
            if "{{" not in str(value):
                values[name] = value
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
    names = set(_yaml(PROJECT / "group_vars/all/fleet.yml"))
    names.update(re.findall(r"\bfleet_[a-z_]+[a-z]\b", (PROJECT / "docs/variables.md").read_text()))
    return sorted(names)


@functools.cache
def _derived() -> dict[str, Any]:
    """The four derived tables, from DERIVED when it was made from the same files (names, sizes
    and times), else read afresh and written there (best effort: a read-only checkout reads)."""
    files = sorted(path for pattern in SOURCES for path in PROJECT.glob(pattern))
    stamp = [(str(path.relative_to(PROJECT)), st.st_mtime_ns, st.st_size) for path in files for st in [path.stat()]]
    signature = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()
    try:
        kept = json.loads(DERIVED.read_text())
        if kept.get("signature") == signature:
            return kept
    except (OSError, ValueError):
        pass
    derived = {"signature": signature, "specs": _read_specs(), "defaults": _read_defaults(),
               "outputs": _read_outputs(), "fleet": _read_fleet_names()}  # fmt: skip
    try:
        DERIVED.parent.mkdir(exist_ok=True)
        partial = DERIVED.with_name(f"{DERIVED.name}.{os.getpid()}")
        partial.write_text(json.dumps(derived))
        partial.replace(DERIVED)
    except OSError:
        pass
    return derived


@functools.cache
def role_specs() -> dict[str, tuple[str, dict[str, Any]]]:
    """option name -> (role, its argument spec without the documentation-only keys)."""
    return {name: (role, spec) for name, (role, spec) in _derived()["specs"].items()}


def role_defaults() -> dict[str, Any]:
    """The literal defaults of every role (templated ones are left out)."""
    return _derived()["defaults"]


@functools.cache
def role_outputs() -> frozenset[str]:
    """Variables the roles set themselves (set_fact, register): not inputs, never typos."""
    return frozenset(_derived()["outputs"])


@functools.cache
def fleet_names() -> frozenset[str]:
    """The fleet_* inputs: group_vars/all/fleet.yml and those documented in docs/variables.md."""
    return frozenset(_derived()["fleet"])


def _role_of(name: str) -> str | None:
    roles = {role for role, _ in role_specs().values()}
    matches = [r for r in roles if name.startswith(r + "_")]
    return max(matches, key=len) if matches else None


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f"did you mean {close[0]}?" if close else "see ansible-doc -t role -r roles <role>"


def _plain(value: Any) -> Any:
    """The value as plain dicts and lists. Ansible hands a filter its variables' mappings and lists
    as lazy containers, which template on access; ArgumentSpecValidator deep-copies what it
    validates, and a deep copy of a lazy container costs a copy of its templating state: most of
    this check's time per host before (docs/performance.md, "A thousand hosts")."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        items = [_plain(item) for item in value]
        return tuple(items) if isinstance(value, tuple) else items
    return value


def _spec_problems(provided: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Type and choice problems of the role variables set, unknown role variables, and the values
    converted to their documented types."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # noqa: PLC0415 - Ansible's own

    specs, problems, values = role_specs(), [], {}
    for name, value in sorted(provided.items()):
        role = _role_of(name)
        if role is None or (name not in specs and name in role_outputs()):
            continue
        if name not in specs:
            documented = [n for n, (r, _) in specs.items() if r == role]
            problems.append(
                f"{name}={_show(value)}: no such variable in role {role}; fix: {_did_you_mean(name, documented)}"
            )
            continue
        result = ArgumentSpecValidator({name: specs[name][1]}).validate({name: value})
        for message in result.error_messages:
            problems.append(f"{name}={_show(value)}: {message}; fix: see ansible-doc -t role -r roles {specs[name][0]}")
        if not result.error_messages:
            values[name] = result.validated_parameters[name]
    return problems, values


def _int_problems(values: Mapping[str, Any], low: int, names: tuple[str, ...], high: int | None = None) -> list[str]:
    problems = []
    for name in names:
        value = values.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and (value < low or (high and value > high)):
            span = f"{low}-{high}" if high else f">= {low}"
            problems.append(f"{name}={value}: out of range (valid: {span}); fix: set it in host_vars or group_vars")
    return problems


def _fleet_problems(v: Mapping[str, Any]) -> list[str]:
    problems = []
    root = v.get("fleet_data_root")
    if not isinstance(root, str) or not SAFE_PATH.fullmatch(root) or os.path.normpath(root) != root or root == "/":
        problems.append(
            f"fleet_data_root={_show(root)}: must be an absolute, normalized path other than / made of letters, "
            "digits and ._+-/ (it goes into unit files, docker -v and shell commands); fix: e.g. /srv/ftfleet"
        )
    problems += _gpu_list_problems(v.get("fleet_gpu_devices"))
    for name in ("fleet_pipeline_para_size", "fleet_tensor_para_size"):
        value = v.get(name)
        try:
            ok = not isinstance(value, bool) and int(str(value)) >= 1
        except ValueError:
            ok = False
        if not ok:
            problems.append(f"{name}={_show(value)}: must be a whole number >= 1; fix: e.g. 1")
    if v.get("fleet_convert_engine") not in ("native", "upstream"):
        problems.append(f"fleet_convert_engine={_show(v.get('fleet_convert_engine'))}: must be native or upstream")
    if not isinstance(v.get("fleet_gateway", True), bool):
        problems.append(f"fleet_gateway={_show(v.get('fleet_gateway'))}: must be true or false, unquoted")
    if not isinstance(v.get("fleet_require_gpus"), bool):
        problems.append(
            f"fleet_require_gpus={_show(v.get('fleet_require_gpus'))}: must be true or false (a quoted string "
            "is always true in a condition); fix: write it unquoted"
        )
    for name in ("fleet_triton_container_version", "fleet_ft_container_version"):
        try:
            container_sms(v.get(name))
        except AnsibleFilterError as err:
            problems.append(f"{name}={_show(v.get(name))}: {str(err).split(': ', 1)[1]}")
    token = v.get("fleet_hf_token", "")
    if not isinstance(token, str) or re.search(r"\s", token):
        problems.append("fleet_hf_token: must be one word without spaces or line breaks; fix: the vault file")
    certs = v.get("fleet_extra_ca_certificates", [])
    if not isinstance(certs, list) or not all(isinstance(c, str) for c in certs):
        problems.append("fleet_extra_ca_certificates: must be a list of PEM texts or paths")
    if v.get("fleet_model") not in ({}, None):  # {}: a host that serves no model
        problems += fleet_model_problems(v["fleet_model"])
    problems += _serve_batch_problems(v) + _registry_problems(v) + _canary_problems(v)
    return problems


REGISTRY = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._/-][a-z0-9]+)*)?")


def _registry_problems(v: Mapping[str, Any]) -> list[str]:
    """fleet_registry and its credentials and CA (the password is never shown)."""
    registry, user = v.get("fleet_registry", ""), v.get("fleet_registry_username", "")
    password, ca = v.get("fleet_registry_password", ""), v.get("fleet_registry_ca_certificate", "")
    problems = []
    if not isinstance(registry, str) or (registry and not REGISTRY.fullmatch(registry)):
        hint = " without the scheme" if isinstance(registry, str) and "://" in registry else ""
        problems.append(
            f"fleet_registry={_show(registry)}: must be host[:port][/path]{hint} in lower case, as docker names "
            "images; fix: e.g. registry.example.com:5000/ftfleet, or empty for no registry"
        )
    elif registry and not 0 < int([*registry.split("/")[0].split(":"), "443"][1]) < 65536:
        problems.append(f"fleet_registry={_show(registry)}: the port must be 1-65535")
    if not isinstance(user, str) or re.search(r"\s|:", user):
        problems.append(f"fleet_registry_username={_show(user)}: must be one word without ':'")
    if not isinstance(password, str) or "\n" in password:
        problems.append("fleet_registry_password: must be one line of text; fix: the vault file")
    elif bool(user) != bool(password):
        problems.append(
            "fleet_registry_username and fleet_registry_password: set both (basic auth) or neither; "
            "fix: the vault file holds the password"
        )
    if (user or password) and not registry:
        problems.append("fleet_registry_username: credentials without fleet_registry; fix: set fleet_registry")
    if not isinstance(ca, str) or (ca and "-----BEGIN CERTIFICATE-----" not in ca):
        problems.append(
            "fleet_registry_ca_certificate: must be the PEM text of a CA certificate (-----BEGIN CERTIFICATE-----); "
            "fix: e.g. \"{{ lookup('file', 'files/registry-ca.pem') }}\", or empty for the hosts' own trust"
        )
    insecure = v.get("fleet_registry_insecure", False)
    if not isinstance(insecure, bool):
        problems.append(f"fleet_registry_insecure={_show(insecure)}: must be true or false, unquoted")
    elif insecure and ca:
        problems.append(
            "fleet_registry_insecure: true with fleet_registry_ca_certificate: a plain-HTTP registry has no "
            "certificate; fix: drop one of them"
        )
    return problems


def _gpu_list_problems(devices: Any) -> list[str]:
    if not isinstance(devices, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
        return [f"fleet_gpu_devices={_show(devices)}: must be a list of GPU indices; fix: e.g. [0, 1]"]
    if any(d < 0 for d in devices) or len(set(devices)) != len(devices):
        dupes = sorted({d for d in devices if devices.count(d) > 1})
        what = f"index {', '.join(map(str, dupes))} is listed twice" if dupes else "indices must be >= 0"
        return [f"fleet_gpu_devices={devices}: {what}; fix: list each GPU of the host once"]
    return []


def _serve_batch_problems(v: Mapping[str, Any]) -> list[str]:
    problems = []
    serial = v.get("fleet_serve_serial")
    batches = serial if isinstance(serial, list) else [serial]
    if serial is not None and (
        not batches
        or not all(re.fullmatch(r"[1-9]\d*|(100|[1-9]\d?)%", str(b)) and not isinstance(b, bool) for b in batches)
    ):
        problems.append(
            f"fleet_serve_serial={_show(serial)}: must be a number >= 1, a percentage 1%-100%, or a "
            'list of them (batch sizes; the last repeats); fix: e.g. 1, "25%" or [1, "10%", "50%"]'
        )
    fail = v.get("fleet_serve_max_fail_percentage")
    if fail is not None and not (re.fullmatch(r"\d+", str(fail)) and int(fail) <= 100):
        problems.append(f"fleet_serve_max_fail_percentage={_show(fail)}: must be a number from 0 to 100")
    return problems


def _whole(value: Any) -> int | None:
    """An integer as the inventory writes one (not a bool, not 1.5), else None."""
    if isinstance(value, bool) or not re.fullmatch(r"-?\d+", str(value).strip()):
        return None
    return int(str(value).strip())


def _decimal(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def _canary_problems(v: Mapping[str, Any]) -> list[str]:
    """fleet_canary_*: role canary's inputs (docs/operations.md "Canary")."""
    problems = []
    bounds = {  # name: (parse, lowest, highest, what)
        "fleet_canary_hosts": (_whole, 0, None, "a whole number >= 0 (0: no canary)"),
        "fleet_canary_weight": (_whole, 1, 100, "a whole number from 1 to 100 (percent of a host's weight)"),
        "fleet_canary_seconds": (_whole, 10, None, "a whole number of seconds >= 10"),
        "fleet_canary_max_error_ratio": (_decimal, 0.0, 1.0, "a number from 0 to 1 (0.01: 1 % of the answers)"),
        "fleet_canary_max_p95_ratio": (
            _decimal,
            1.0,
            None,
            "a number >= 1 (1.5: half as slow again as the other hosts)",
        ),
        "fleet_canary_max_restarts": (_whole, 0, None, "a whole number >= 0"),
    }
    for name, (parse, low, high, what) in bounds.items():
        if name not in v:
            continue
        value = parse(v[name])
        if value is None or value < low or (high is not None and value > high):
            problems.append(f"{name}={_show(v[name])}: must be {what}")
    prompts = v.get("fleet_canary_golden_prompts", [])
    if not isinstance(prompts, list):
        wanted = "a list of {prompt, expected} or {prompt, expected_prefix}"
        return [*problems, f"fleet_canary_golden_prompts={_show(prompts)}: must be {wanted}"]
    for i, item in enumerate(prompts):
        where = f"fleet_canary_golden_prompts[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}={_show(item)}: must be a mapping with prompt and expected or expected_prefix")
            continue
        unknown = sorted(set(item) - {"prompt", "expected", "expected_prefix", "max_tokens"})
        wants = [k for k in ("expected", "expected_prefix") if k in item]
        if unknown:
            problems.append(
                f"{where}: unknown key(s) {', '.join(unknown)}; fix: prompt, expected or expected_prefix, max_tokens"
            )
        if not isinstance(item.get("prompt"), str) or not item.get("prompt"):
            problems.append(f"{where}: prompt must be a text that is not empty")
        if len(wants) != 1 or not isinstance(item[wants[0]], str):
            problems.append(
                f"{where}: needs exactly one of expected (the whole completion) or expected_prefix, as text"
            )
        tokens = _whole(item.get("max_tokens", 16))
        if tokens is None or tokens < 1:
            problems.append(f"{where}: max_tokens={_show(item.get('max_tokens'))}: must be a whole number >= 1")
    if prompts and v.get("fleet_gateway") is False:
        problems.append(
            "fleet_canary_golden_prompts: the golden prompts are asked through the gateway; fix: fleet_gateway: true"
        )
    return problems


def _unknown_fleet(provided: Mapping[str, Any]) -> list[str]:
    known = sorted(fleet_names())
    return [
        f"{name}={_show(value)}: no such fleet variable; fix: {_did_you_mean(name, known)} (docs/variables.md)"
        for name, value in sorted(provided.items())
        if name.startswith("fleet_") and name not in known
    ]


def _server_problems(v: Mapping[str, Any]) -> list[str]:
    ports = {n: v.get(f"triton_server_{n}_port") for n in ("http", "grpc", "metrics")}
    problems = _int_problems(v, 1, tuple(f"triton_server_{n}_port" for n in ports), 65535)
    numbers = [p for p in ports.values() if isinstance(p, int)]
    if len(set(numbers)) != len(numbers):
        shown = ", ".join(f"triton_server_{n}_port={p}" for n, p in ports.items())
        problems.append(f"{shown}: two of them are the same port; fix: three distinct ports in host_vars")
    unit = v.get("triton_server_model_name")
    if isinstance(unit, str) and "{{" not in unit and not SAFE_NAME.fullmatch(unit):
        problems.append(
            f"triton_server_model_name={unit!r}: must be letters, digits and ._- (it names the unit and the "
            "container); fix: remove it (it follows fleet_model.name)"
        )
    address = v.get("triton_server_bind_address", "")
    if address:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            problems.append(f"triton_server_bind_address={address!r}: not an IP address; fix: e.g. 127.0.0.1 or ''")
    shm = v.get("triton_server_shm_size")
    if isinstance(shm, str) and not re.fullmatch(r"[1-9]\d*[bkmgBKMG]?", shm):
        problems.append(f"triton_server_shm_size={shm!r}: not a size docker takes; fix: e.g. 1g, 4g, 512m")
    for limit in v.get("triton_server_ulimits") or []:
        if not re.fullmatch(r"[a-z]+=-?\d+(:-?\d+)?", str(limit)):
            problems.append(f"triton_server_ulimits: {limit!r} is not NAME=SOFT[:HARD]; fix: e.g. memlock=-1")
    problems += _int_problems(v, 0, ("triton_server_restart_sec",))
    problems += _int_problems(v, 1, ("triton_server_restart_max_sec", "triton_server_start_limit_burst",
                                     "triton_server_start_limit_interval_sec", "triton_server_ready_timeout",
                                     "triton_server_smoke_output_len", "triton_server_smoke_timeout",
                                     "triton_server_log_lines"))  # fmt: skip
    return problems


KEY_FIELDS = ("name", "key", "rate_per_minute", "concurrent_requests", "models", "expires")


def _count_problem(value: Any, low: int) -> str:
    """What is wrong with a limit that must be a whole number >= low (0 meaning none), or ""."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= low:
        return ""
    return f"must be a whole number >= {low}" + ("" if low else " (0: no limit)")


def _key_field_problems(label: str, item: Mapping[str, Any]) -> list[str]:
    """A key's optional fields: its limits, models and expiry, and nothing else."""
    problems = [
        f"{label}: {field!r} {why}"
        for field, low in (("rate_per_minute", 1), ("concurrent_requests", 0))
        if (why := _count_problem(item.get(field, low), low))
    ]
    models = item.get("models")
    if models is not None and (not isinstance(models, list) or not models
                               or not all(isinstance(m, str) and m for m in models)):  # fmt: skip
        problems.append(f"{label}: 'models' must be a non-empty list of model names (fleet_model.name); "
                        "fix: leave it out for a key that may use every model")  # fmt: skip
    if item.get("expires") is not None:
        try:
            key_expiry(item["expires"])
        except ValueError as err:
            problems.append(f"{label}: 'expires': {err}")
    unknown = sorted(set(item) - set(KEY_FIELDS))
    if unknown:
        problems.append(f"{label}: unknown field(s) {unknown}; valid: {', '.join(KEY_FIELDS)}")
    return problems


def _api_key_problems(keys: Any, anonymous: Any) -> list[str]:
    """fleet_api_keys / gateway_api_keys: named by their names only, never by their values."""
    if not isinstance(keys, list) or not all(isinstance(k, Mapping) for k in keys):
        return ["gateway_api_keys (fleet_api_keys): must be a list of {name, key, rate_per_minute, ...} mappings; "
                "fix: see docs/serving-front.md (keys live in the vault)"]  # fmt: skip
    problems, names, values = [], set(), set()
    for i, item in enumerate(keys):
        name = item.get("name")
        label = f"fleet_api_keys[{i}]" + (f" ({name})" if isinstance(name, str) else "")
        if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
            problems.append(f"{label}: 'name' must be letters, digits and ._- ; fix: name each key after its user")
        elif name in names:
            problems.append(f"{label}: the name {name!r} is used twice; fix: one entry per key")
        names.add(name)
        key = item.get("key")
        if not isinstance(key, str) or len(key) < 16 or re.search(r"\s", key):
            problems.append(f"{label}: 'key' must be a string of at least 16 characters without spaces; fix: "
                            "python -m ftgateway new-key")  # fmt: skip
        elif key in values:
            problems.append(f"{label}: the same key as another entry; fix: a new key per user")
        values.add(key if isinstance(key, str) else None)
        problems += _key_field_problems(label, item)
    if not keys and anonymous is not True:
        problems.append("fleet_api_keys=[]: the gateway needs at least one API key; fix: add keys to the vault "
                        "(python -m ftgateway new-key), or set gateway_allow_anonymous: true on purpose")  # fmt: skip
    return problems


# Triton's gRPC stream says that a request is complete (the response parameter
# triton_final_response, asked for with enable_empty_final_response) from release 23.06 on
# (triton-inference-server/server PR 5878, documented for 23.06 in PR 5965). The FT backend marks
# a decoupled answer's last response only so (TRITONSERVER_RESPONSE_COMPLETE_FINAL on it).
FINAL_RESPONSE_FLAG_FROM = (23, 6)


def decoupled_problems(v: Mapping[str, Any]) -> list[str]:
    """A decoupled model behind the gateway on a Triton that cannot say when its answer ends:
    every streamed request would wait for the gateway's timeout. Not checked where the image
    comes from an archive (triton_image_archive: its release is not fleet_triton_container_version)."""
    if v.get("triton_model_repo_decoupled") is not True or v.get("fleet_gateway") is not True:
        return []
    version = v.get("fleet_triton_container_version")
    text = version.strip().removesuffix("-py3") if isinstance(version, str) else ""
    match = re.fullmatch(r"(\d{2})\.(\d{2})", text)
    if v.get("triton_image_archive") or match is None or (int(match[1]), int(match[2])) >= FINAL_RESPONSE_FLAG_FROM:
        return []
    return [
        f"triton_model_repo_decoupled with fleet_triton_container_version={version}: the gateway reads a decoupled "
        "model's stream until Triton marks its last response (triton_final_response), which Triton does from 23.06 "
        "on; with this release every streamed request would wait for the gateway's timeout; fix: "
        "fleet_triton_container_version 23.06 or later, or triton_model_repo_decoupled: false (a streamed answer "
        "then comes in one chunk)"
    ]


BUILD_RECIPE = "roles/triton_image/files/ftb/recipe.json"


@functools.lru_cache(maxsize=1)
def _recipe_releases() -> dict[str, Any]:
    return json.loads((PROJECT / BUILD_RECIPE).read_text())["releases"]


def build_recipe_problems(v: Mapping[str, Any]) -> list[str]:
    """A Triton release whose Triton+FT image cannot be built: refused with the releases that can.
    Not checked where the image comes from an archive, or where the host serves no model."""
    version = v.get("fleet_triton_container_version")
    if v.get("triton_image_archive") or not v.get("fleet_model") or not isinstance(version, str):
        return []
    release = _recipe_releases().get(version.strip().removesuffix("-py3"))
    if release is None or "refused" not in release:  # unknown releases: the fleet checks name them
        return []
    buildable = ", ".join(name for name, r in _recipe_releases().items() if "refused" not in r)
    return [
        f"fleet_triton_container_version={version}: no Triton+FT image can be built for it: upstream's "
        "docker/Dockerfile pins torch 2.0.1, which has no wheel for its Python "
        f"{release['python']}, and the project's build recipe ({BUILD_RECIPE}) refuses it: {release['refused']}; "
        f"fix: one of {buildable}, or triton_image_archive with an image built elsewhere"
    ]


CHAT_TEMPLATES = "roles/gateway/files/chat-templates"


def _chat_template_problems(name: Any) -> list[str]:
    """gateway_chat_template: empty (the model's own), a template the project ships, or an
    absolute path on the controller."""
    if not isinstance(name, str):
        return [f"gateway_chat_template={_show(name)}: must be a template's name or a path"]
    shipped = sorted(p.stem for p in (PROJECT / CHAT_TEMPLATES).glob("*.jinja"))
    if not name or (name.startswith("/") and Path(name).is_file()) or name in shipped:
        return []
    return [
        f"gateway_chat_template={_show(name)}: no such template; fix: one of {', '.join(shipped)} "
        f"({CHAT_TEMPLATES}), an absolute path to a Jinja file on the controller, or empty for the model's own"
    ]


def gateway_problems(v: Mapping[str, Any]) -> list[str]:
    """The gateway's inputs: keys, port (in range, not one of tritonserver's), limits, TLS files."""
    keys = v.get("gateway_api_keys", v.get("fleet_api_keys", []))
    problems = _api_key_problems(keys, v.get("gateway_allow_anonymous", False))
    model = v.get("gateway_model_name") or (v.get("fleet_model") or {}).get("name")
    if not problems and keys and isinstance(model, str) and not gateway_probe_key(keys, model):
        problems.append(f"fleet_api_keys: no key may use the model {model!r} now (each names other models or has "
                        "expired), so no client could, nor the serve stage's gate; fix: add the model to a key's "
                        "models, or a new key")  # fmt: skip
    problems += _int_problems(v, 1, ("gateway_port",), 65535)
    problems += [
        f"{name}={_show(v.get(name, low))}: {why}"
        for name, low in (("fleet_api_key_rate_per_minute", 1), ("fleet_api_key_concurrent_requests", 0))
        if (why := _count_problem(v.get(name, low), low))
    ]
    port = v.get("gateway_port")
    clash = [f"triton_server_{n}_port" for n in ("http", "grpc", "metrics")
             if isinstance(port, int) and v.get(f"triton_server_{n}_port") == port]  # fmt: skip
    if clash:
        problems.append(f"gateway_port={port}: the same port as {clash[0]}; fix: another port for one of them")
    problems += _int_problems(v, 1, ("gateway_max_tokens", "gateway_rate_per_minute", "gateway_max_request_bytes",
                                     "gateway_request_timeout_s", "gateway_ready_timeout",
                                     "gateway_context_length_fallback"))  # fmt: skip
    problems += _int_problems(v, 0, ("gateway_context_length", "gateway_graceful_seconds"))
    context, most = v.get("gateway_context_length"), v.get("gateway_max_tokens")
    if isinstance(context, int) and isinstance(most, int) and context > 0 and most >= context:
        problems.append(f"gateway_max_tokens={most}: not below gateway_context_length={context} (no room for a "
                        "prompt); fix: a smaller gateway_max_tokens")  # fmt: skip
    problems += _chat_template_problems(v.get("gateway_chat_template", ""))
    cert, key = v.get("gateway_tls_cert", ""), v.get("gateway_tls_key", "")
    if bool(cert) != bool(key):
        problems.append("gateway_tls_cert and gateway_tls_key: set both (a certificate and its key) or neither")
    for name, path in (("gateway_tls_cert", cert), ("gateway_tls_key", key)):
        if path and (not isinstance(path, str) or not os.path.isabs(path)):
            problems.append(f"{name}={_show(path)}: must be an absolute path on the host")
    address = v.get("gateway_bind_address", "0.0.0.0")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        problems.append(f"gateway_bind_address={_show(address)}: not an IP address; fix: e.g. 0.0.0.0 or 127.0.0.1")
    return problems


def triton_model_repo_problems(v: Mapping[str, Any], model: Mapping[str, Any]) -> list[str]:
    """Settings of the model repository that Triton or the FT backend cannot serve (used by the
    role triton_model_repo too)."""
    problems = _int_problems(v, 1, ("triton_model_repo_max_batch_size",))
    problems += _int_problems(v, 0, ("triton_model_repo_max_queue_delay_us",))
    dynamic, sequence = v.get("triton_model_repo_dynamic_batching"), v.get("triton_model_repo_sequence_batching")
    batch, int8 = v.get("triton_model_repo_max_batch_size"), v.get("triton_model_repo_int8_mode", 0)
    if dynamic and sequence:
        problems.append(
            "triton_model_repo_dynamic_batching and triton_model_repo_sequence_batching are both true: "
            "Triton takes one or the other; fix: set one of them to false"
        )
    if sequence and batch != 1:
        problems.append(
            f"triton_model_repo_sequence_batching needs triton_model_repo_max_batch_size 1, not {batch}; "
            "fix: set triton_model_repo_max_batch_size: 1"
        )
    family = FAMILIES.get(model.get("family", ""))
    if int8 not in (0, 1, 2):
        problems.append(f"triton_model_repo_int8_mode={int8}: valid 0, 1 (weight-only), 2; fix: 0 turns it off")
    elif int8 and family and not family.int8:
        problems.append(
            f"triton_model_repo_int8_mode={int8}: the {family.name} backend has no int8 mode "
            "(families with one: gpt, bloom, llama); fix: 0"
        )
    elif int8 and model.get("data_type") == "fp32":
        problems.append(
            f"triton_model_repo_int8_mode={int8} with fleet_model.data_type=fp32: int8 needs fp16 or bf16; "
            "fix: data_type fp16, or int8_mode 0"
        )
    return problems


def _tp_problems(v: Mapping[str, Any]) -> list[str]:
    tp = v.get("fleet_tensor_para_size")
    return [
        f"{name}={v[name]} but fleet_tensor_para_size={tp}: shards and tuning must be made for the serving "
        f"tensor-parallel size; fix: remove {name} (it follows fleet_gpu_devices)"
        for name in ("ft_convert_tp", "ft_gemm_tune_tp")
        if name in v and str(v[name]) != str(tp)
    ]


def _path_problems(provided: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    problems = []
    for name, (_, spec) in sorted(role_specs().items()):
        value = values.get(name)
        if name not in provided or not isinstance(value, str) or not value:
            continue
        container_path = name.endswith("container_dir") or name.endswith("_root") or name == "ft_convert_python"
        if (spec.get("type") == "path" or container_path) and not os.path.expanduser(value).startswith("/"):
            problems.append(f"{name}={value!r}: must be an absolute path; fix: e.g. /srv/ftfleet/...")
    return problems


def _gpu_problems(v: Mapping[str, Any], gpus: Mapping[str, Any]) -> list[str]:
    devices = v.get("fleet_gpu_devices")
    if not v.get("fleet_require_gpus") or not isinstance(devices, list):
        return []
    assigned = [d for d in gpus.get("devices") or [] if d.get("index") in devices]
    problems, kinds = [], {}  # (SM, GPU name) -> indices: one problem per kind of GPU, not per GPU
    for device in assigned:
        try:
            sm = cuda_sm(device.get("compute_capability"))
        except AnsibleFilterError as err:
            problems.append(f"GPU {device.get('index')} ({device.get('name')}): {str(err).split(': ', 1)[1]}")
            continue
        kinds.setdefault((sm, device.get("name")), []).append(str(device.get("index")))
    model = v.get("fleet_model") or {}
    for (sm, name), indices in kinds.items():
        which = f"GPU {', '.join(indices)} ({name}, SM {sm}"
        for container in ("fleet_ft_container_version", "fleet_triton_container_version"):
            try:
                table = container_sms(v.get(container))
            except AnsibleFilterError:
                continue  # reported with the fleet_* checks
            if sm not in table["sms"]:
                newer = "22.10 or later" if sm in ("89", "90") else "a newer release"
                problems.append(
                    f"{container}={v.get(container)}: its CUDA {table['cuda']} cannot build FT for {which}; "
                    f"it builds SM {', '.join(table['sms'])}); fix: {newer} (docs/variables.md: container "
                    "versions for each GPU)"
                )
        if isinstance(model, Mapping) and model.get("data_type") == "bf16" and int(sm) < 80:
            problems.append(f"fleet_model.data_type=bf16: {which}) has no bf16 (SM 80 or later); fix: data_type fp16")
    sm_arg = v.get("ft_image_sm")
    if sm_arg and assigned:
        needed = {cuda_sm(d["compute_capability"]) for d in assigned if d.get("compute_capability")}
        given = set(str(sm_arg).split(","))
        if not needed <= given:
            problems.append(
                f"ft_image_sm={sm_arg!r}: does not cover the assigned GPUs (SM {', '.join(sorted(needed))}); "
                "fix: remove it (it follows the GPUs) or add those values"
            )
    return problems


def fleet_input_problems(provided: Any, gpus: Any = None) -> list[str]:
    if not isinstance(provided, Mapping):
        raise AnsibleFilterError(f"fleet_input_problems: expected a dict of variables, got {type(provided).__name__}")
    provided = _plain(provided)
    problems, converted = _spec_problems(provided)
    values = {**role_defaults(), **provided, **converted}
    problems += _unknown_fleet(provided) + _fleet_problems(values)
    problems += _server_problems(values) + _tp_problems(values) + _path_problems(provided, values)
    problems += _int_problems(values, 1, ("ft_gemm_tune_batch_size", "ft_gemm_tune_beam_width",
                                          "ft_gemm_tune_max_input_len", "ft_convert_workers", "ft_convert_timeout",
                                          "ft_gemm_tune_timeout", "container_image_progress_interval",
                                          "container_image_timeout", "nvidia_driver_reboot_timeout"))  # fmt: skip
    problems += monitoring_input_problems(values)
    branch = values.get("nvidia_driver_branch")
    if branch is not None and not re.fullmatch(r"\d{3}", str(branch)):
        problems.append(f"nvidia_driver_branch={_show(branch)}: must be a driver branch such as '535'")
    model = values.get("fleet_model")
    if isinstance(model, Mapping) and model and values.get("fleet_gateway") is True:
        problems += gateway_problems(values) + decoupled_problems(values)
    if isinstance(model, Mapping) and model and not fleet_model_problems(model):
        problems += triton_model_repo_problems(values, fleet_model_resolved(model))
    problems += build_recipe_problems(values)
    if isinstance(gpus, Mapping):
        problems += _gpu_problems(values, gpus)
    return problems


def fleet_input_names(names: Any) -> list[str]:
    """From a list of variable names, those this check reads: fleet_* and every role's prefix."""
    if not isinstance(names, list | tuple):
        raise AnsibleFilterError(f"fleet_input_names: expected a list of names, got {type(names).__name__}")
    return sorted(n for n in names if isinstance(n, str)
                  and (n.startswith("fleet_") or n == "monitoring_targets" or _role_of(n)))  # fmt: skip


def ft_model_params_problems(hf_config: Any, family: Any) -> list[str]:
    """What ft_model_params refuses in a config.json, as a list (empty when it converts)."""
    from ft_model import ft_model_params  # noqa: PLC0415 - sibling plugin, loaded by path

    try:
        ft_model_params(hf_config, family)
    except AnsibleFilterError as err:
        return [str(err).removeprefix("ft_model_params: ")]
    return []


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "fleet_input_names": fleet_input_names,
            "fleet_input_problems": fleet_input_problems,
            "gateway_problems": gateway_problems,
            "ft_model_params_problems": ft_model_params_problems,
            "triton_model_repo_problems": triton_model_repo_problems,
        }
