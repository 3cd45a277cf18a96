"""The gateway's inputs: API keys, port, limits, chat template and TLS files."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ftdomain.fleet.gateway import gateway_probe_key, key_expiry
from ftdomain.fleet.model import SAFE_NAME
from ftdomain.inputs.common import PROJECT, count_problem, int_problems, show

KEY_FIELDS = ("name", "key", "rate_per_minute", "concurrent_requests", "tokens_per_minute", "models", "expires")


def _key_field_problems(label: str, item: Mapping[str, Any]) -> list[str]:
    """A key's optional fields: its limits, models and expiry, and nothing else."""
    problems = [
        f"{label}: {field!r} {why}"
        for field, low in (("rate_per_minute", 1), ("concurrent_requests", 0), ("tokens_per_minute", 0))
        if (why := count_problem(item.get(field, low), low))
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


def _rounds_problems(v: Mapping[str, Any]) -> list[str]:
    """A slice as long as the longest answer the gateway lets through slices nothing: rounds would
    be on in name only (docs/gateway.md, "Rounds")."""
    slices, most = v.get("gateway_slice_tokens", 0), v.get("gateway_max_tokens")
    if isinstance(slices, int) and isinstance(most, int) and 0 < most <= slices:
        return [f"gateway_slice_tokens={slices}: not below gateway_max_tokens={most}, so no answer is ever sliced "
                "and rounds do nothing; fix: a shorter slice (docs/performance.md, \"Rounds\"), or 0 to turn rounds "
                "off"]  # fmt: skip
    return []


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


CHAT_TEMPLATES = "roles/gateway/files/chat-templates"


def _chat_template_problems(name: Any) -> list[str]:
    """gateway_chat_template: empty (the model's own), a template the project ships, or an
    absolute path on the controller."""
    if not isinstance(name, str):
        return [f"gateway_chat_template={show(name)}: must be a template's name or a path"]
    shipped = sorted(p.stem for p in (PROJECT / CHAT_TEMPLATES).glob("*.jinja"))
    if not name or (name.startswith("/") and Path(name).is_file()) or name in shipped:
        return []
    return [
        f"gateway_chat_template={show(name)}: no such template; fix: one of {', '.join(shipped)} "
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
    problems += int_problems(v, 1, ("gateway_port",), 65535)
    problems += int_problems(v, 1, ("gateway_max_best_of",), 16)  # FT's online beam search takes 16 beams at most
    problems += [
        f"{name}={show(v.get(name, low))}: {why}"
        for name, low in (
            ("fleet_api_key_rate_per_minute", 1),
            ("fleet_api_key_concurrent_requests", 0),
            ("fleet_api_key_tokens_per_minute", 0),
        )
        if (why := count_problem(v.get(name, low), low))
    ]
    port = v.get("gateway_port")
    clash = [f"triton_server_{n}_port" for n in ("http", "grpc", "metrics")
             if isinstance(port, int) and v.get(f"triton_server_{n}_port") == port]  # fmt: skip
    if clash:
        problems.append(f"gateway_port={port}: the same port as {clash[0]}; fix: another port for one of them")
    problems += int_problems(v, 1, ("gateway_max_tokens", "gateway_rate_per_minute", "gateway_max_request_bytes",
                                     "gateway_request_timeout_s", "gateway_ready_timeout",
                                     "gateway_context_length_fallback"))  # fmt: skip
    problems += int_problems(
        v,
        0,
        (
            "gateway_context_length",
            "gateway_graceful_seconds",
            "gateway_continuations",
            "gateway_max_in_flight",
            "gateway_admission_wait_ms",
            "gateway_admission_queue",
            "gateway_slo_ttft_ms",
            "gateway_slo_itl_ms",
            "gateway_slice_tokens",
        ),
    )
    problems += _rounds_problems(v)
    fleet_key = v.get("gateway_fleet_key", v.get("fleet_gateway_key", ""))
    if not isinstance(fleet_key, str) or (fleet_key and (len(fleet_key) < 16 or fleet_key != fleet_key.strip())):
        problems.append("fleet_gateway_key: the fleet's key must be a string of at least 16 characters without "
                        "surrounding spaces (empty: no continuations); fix: python -m ftgateway new-key")  # fmt: skip
    ca = v.get("gateway_peer_ca", "")
    if ca and (not isinstance(ca, str) or "-----BEGIN CERTIFICATE-----" not in ca):
        problems.append("gateway_peer_ca: not a PEM certificate (-----BEGIN CERTIFICATE-----); fix: the CA's PEM text, "
                        "as load_balancer_gateway_ca")  # fmt: skip
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
            problems.append(f"{name}={show(path)}: must be an absolute path on the host")
    address = v.get("gateway_bind_address", "0.0.0.0")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        problems.append(f"gateway_bind_address={show(address)}: not an IP address; fix: e.g. 0.0.0.0 or 127.0.0.1")
    return problems
