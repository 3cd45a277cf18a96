"""The fleet_* inputs: data root, GPUs, parallel sizes, engines, containers, token, registry and
the serve stage's batches."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.model import fleet_model_problems
from ftdomain.ft.cuda import container_sms
from ftdomain.inputs.canary import canary_problems
from ftdomain.inputs.common import SAFE_PATH, show


def fleet_problems(v: Mapping[str, Any]) -> list[str]:
    problems = []
    root = v.get("fleet_data_root")
    if not isinstance(root, str) or not SAFE_PATH.fullmatch(root) or os.path.normpath(root) != root or root == "/":
        problems.append(
            f"fleet_data_root={show(root)}: must be an absolute, normalized path other than / made of letters, "
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
            problems.append(f"{name}={show(value)}: must be a whole number >= 1; fix: e.g. 1")
    if v.get("fleet_convert_engine") not in ("native", "upstream"):
        problems.append(f"fleet_convert_engine={show(v.get('fleet_convert_engine'))}: must be native or upstream")
    if not isinstance(v.get("fleet_gateway", True), bool):
        problems.append(f"fleet_gateway={show(v.get('fleet_gateway'))}: must be true or false, unquoted")
    if not isinstance(v.get("fleet_require_gpus"), bool):
        problems.append(
            f"fleet_require_gpus={show(v.get('fleet_require_gpus'))}: must be true or false (a quoted string "
            "is always true in a condition); fix: write it unquoted"
        )
    for name in ("fleet_triton_container_version", "fleet_ft_container_version"):
        try:
            container_sms(v.get(name))
        except AnsibleFilterError as err:
            problems.append(f"{name}={show(v.get(name))}: {str(err).split(': ', 1)[1]}")
    token = v.get("fleet_hf_token", "")
    if not isinstance(token, str) or re.search(r"\s", token):
        problems.append("fleet_hf_token: must be one word without spaces or line breaks; fix: the vault file")
    certs = v.get("fleet_extra_ca_certificates", [])
    if not isinstance(certs, list) or not all(isinstance(c, str) for c in certs):
        problems.append("fleet_extra_ca_certificates: must be a list of PEM texts or paths")
    if v.get("fleet_model") not in ({}, None):  # {}: a host that serves no model
        problems += fleet_model_problems(v["fleet_model"])
    problems += _serve_batch_problems(v) + _registry_problems(v) + canary_problems(v)
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
            f"fleet_registry={show(registry)}: must be host[:port][/path]{hint} in lower case, as docker names "
            "images; fix: e.g. registry.example.com:5000/ftfleet, or empty for no registry"
        )
    elif registry and not 0 < int([*registry.split("/")[0].split(":"), "443"][1]) < 65536:
        problems.append(f"fleet_registry={show(registry)}: the port must be 1-65535")
    if not isinstance(user, str) or re.search(r"\s|:", user):
        problems.append(f"fleet_registry_username={show(user)}: must be one word without ':'")
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
        problems.append(f"fleet_registry_insecure={show(insecure)}: must be true or false, unquoted")
    elif insecure and ca:
        problems.append(
            "fleet_registry_insecure: true with fleet_registry_ca_certificate: a plain-HTTP registry has no "
            "certificate; fix: drop one of them"
        )
    return problems


def _gpu_list_problems(devices: Any) -> list[str]:
    if not isinstance(devices, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
        return [f"fleet_gpu_devices={show(devices)}: must be a list of GPU indices; fix: e.g. [0, 1]"]
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
            f"fleet_serve_serial={show(serial)}: must be a number >= 1, a percentage 1%-100%, or a "
            'list of them (batch sizes; the last repeats); fix: e.g. 1, "25%" or [1, "10%", "50%"]'
        )
    fail = v.get("fleet_serve_max_fail_percentage")
    if fail is not None and not (re.fullmatch(r"\d+", str(fail)) and int(fail) <= 100):
        problems.append(f"fleet_serve_max_fail_percentage={show(fail)}: must be a number from 0 to 100")
    return problems
