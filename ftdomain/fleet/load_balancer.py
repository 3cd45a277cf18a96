"""HAProxy's frontends and backends, made from the inventory: one per model that hosts serve."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.gateway import key_expiry
from ftdomain.fleet.keepalived import vip_list
from ftdomain.ft.sizes import whole_number


def _port(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise AnsibleFilterError(f"load_balancer_backends: {what}={value!r}: not a port (1-65535)")
    return value


def load_balancer_backends(hosts: Any, hostvars: Any, ports: Any = None, port: Any = 8090) -> list[dict]:
    if not isinstance(hosts, list | tuple):
        raise AnsibleFilterError(f"load_balancer_backends: expected a list of hosts, got {type(hosts).__name__}")
    ports, endpoint = dict(ports or {}), _port(port, "load_balancer_port")
    members: dict[str, list[dict[str, Any]]] = {}
    for host in hosts:
        v = hostvars[host]
        model = v.get("fleet_model") or {}
        if not isinstance(model, Mapping) or not model.get("name"):
            continue
        address = v.get("lb_member_address") or f"{v.get('ansible_host') or host}:{v.get('gateway_port') or 8080}"
        slots = gateway_slots(v, str(host))
        members.setdefault(str(model["name"]), []).append(
            {"name": str(host), "address": str(address), "tls": bool(v.get("gateway_tls_cert")),
             "tls_name": str(v.get("gateway_tls_name") or host),
             "bind": str(v.get("gateway_bind_address") or "0.0.0.0"),
             "max_request_bytes": int(v.get("gateway_max_request_bytes") or 65536),
             "slots": slots, "maxconn": slots})  # fmt: skip
    backends, taken = [], {endpoint: None}
    for model in sorted(members):
        own = ports.get(model)
        if own is not None:
            own = _port(own, f"load_balancer_ports[{model!r}]")
            if own in taken:
                other = f"model {taken[own]!r}" if taken[own] else "load_balancer_port, the one endpoint of every model"
                raise AnsibleFilterError(
                    f"load_balancer_backends: load_balancer_ports[{model!r}]={own} is also {other}; "
                    "fix: a port of its own for each model in load_balancer_ports, or none (the one endpoint "
                    "serves every model)"
                )
            taken[own] = model
        backends.append({"model": model, "backend": f"model_{model}", "port": own,
                         "servers": sorted(members[model], key=lambda s: s["name"])})  # fmt: skip
    return backends


def gateway_slots(v: Any, host: str = "") -> int:
    """A gateway's generation slots, as its role reads them: gateway_max_in_flight, else the
    fleet's fleet_generation_slots (0: no bound). HAProxy gives it at most that many requests at
    once (maxconn); the model's queue is HAProxy's, fair between keys over all its gateways."""
    for name in ("gateway_max_in_flight", "fleet_generation_slots"):
        value = v.get(name)
        if value is None or value == "":
            continue
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise AnsibleFilterError(f"{name}={value!r} on {host}: not a whole number") from None
        if number < 0:
            raise AnsibleFilterError(f"{name}={number} on {host}: out of range (valid: >= 0)")
        return number
    return 0


def load_balancer_frontends(backends: Any, port: Any) -> list[dict[str, Any]]:
    """The one endpoint (every model, routed by the request's "model"), then each model's own port."""
    if not isinstance(backends, list):
        raise AnsibleFilterError("load_balancer_frontends: expected the backends (load_balancer_backends)")
    fronts = [{"name": "fleet", "port": _port(port, "load_balancer_port"), "backend": ""}]
    return fronts + [{"name": b["backend"], "port": b["port"], "backend": b["backend"]} for b in backends if b["port"]]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _pem_certificates(text: Any) -> list[Any]:
    """The certificates of a PEM text (cryptography comes with ansible-core); ValueError if none."""
    from cryptography import x509  # noqa: PLC0415 - only where TLS is configured

    if not isinstance(text, str) or "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError("not a PEM certificate (-----BEGIN CERTIFICATE-----)")
    return x509.load_pem_x509_certificates(text.encode())


def _not_after(cert: Any) -> datetime.datetime:
    return cert.not_valid_after_utc


def tls_certificate_facts(text: Any, now: Any = None) -> dict[str, Any]:
    """Subject, DNS/IP names, notAfter and whole days left of the first certificate of a PEM text."""
    from cryptography import x509  # noqa: PLC0415

    try:
        cert = _pem_certificates(text)[0]
    except ValueError as err:
        raise AnsibleFilterError(f"tls_certificate_facts: {err}") from err
    moment = now if isinstance(now, datetime.datetime) else datetime.datetime.now(datetime.UTC)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n) for n in san.get_values_for_type(x509.DNSName)]
        names += [str(n) for n in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        names = []
    return {"subject": cert.subject.rfc4514_string(), "names": names,
            "not_after": _not_after(cert).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "days_left": int((_not_after(cert) - moment).total_seconds() // 86400)}  # fmt: skip


def _certificate_problems(name: str, text: str, key_name: str = "", key: str = "") -> list[str]:
    """A PEM certificate (chain) that parses and has not expired, and, given a key, is its pair."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    try:
        chain = _pem_certificates(text)
    except ValueError as err:
        return [f"{name}: {err}; fix: the certificate's PEM text (its chain after it)"]
    problems, now = [], datetime.datetime.now(datetime.UTC)
    if _not_after(chain[0]) <= now:
        problems.append(f"{name}: expired on {_not_after(chain[0]):%Y-%m-%d}; fix: a renewed certificate")
    if not key_name:
        return problems
    try:
        private = serialization.load_pem_private_key(key.encode(), password=None)
    except (ValueError, TypeError) as err:
        # Never the key's text in a message: what is wrong with it, in words.
        reason = "it is encrypted" if "encrypted" in str(err).lower() or isinstance(err, TypeError) else "no PEM key"
        return [*problems, f"{key_name}: not an unencrypted PEM private key ({reason}); fix: the key's PEM text, "
                           "without a passphrase, from the vault"]  # fmt: skip
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if private.public_key().public_bytes(serialization.Encoding.DER, spki) != chain[0].public_key().public_bytes(
        serialization.Encoding.DER, spki
    ):
        problems.append(f"{key_name}: not the key of {name} (their public keys differ); fix: the pair issued together")
    return problems


def _vip_name_problems(cert: str, vip: Any, vip_name: str) -> list[str]:
    """Clients of a virtual address check the certificate against the address or its DNS name."""
    try:
        names = set(tls_certificate_facts(cert)["names"])
    except AnsibleFilterError:
        return []  # _certificate_problems says why it does not parse
    problems = []
    for address in (str(v).split("/")[0] for v in vip_list(vip)):
        if address not in names and vip_name not in names:
            wanted = f"{address} or load_balancer_vip_name={vip_name}" if vip_name else address
            problems.append(
                f"load_balancer_tls_certificate names {', '.join(sorted(names)) or 'nothing'}, not the virtual "
                f"address {wanted} that clients use (load_balancer_vip), so they would refuse it; fix: a "
                "certificate whose subject alternative names include it"
            )
    return problems


def _port_number(value: Any) -> int:
    """A port as a number, 0 where there is none or it is not a number (the argument specs say so)."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _port_problems(lb: Mapping[str, Any], backends: list) -> list[str]:
    """The frontends' ports against HAProxy's other listeners (its metrics, its peers)."""
    fronts = {_port_number(b["port"]): f"load_balancer_ports[{b['model']!r}]" for b in backends if b.get("port")}
    fronts[_port_number(lb.get("load_balancer_port"))] = "load_balancer_port (the one endpoint)"
    others = {"load_balancer_metrics_port": lb.get("load_balancer_metrics_port")}
    if vip_list(lb.get("load_balancer_vip")):
        others["load_balancer_peers_port"] = lb.get("load_balancer_peers_port")
    problems = []
    for name, value in others.items():
        port = _port_number(value)
        if port and port in fronts:
            problems.append(f"{name}={port} is also {fronts[port]}: two listeners on one port; fix: another port "
                            f"for one of them")  # fmt: skip
    return problems


def load_balancer_problems(lb: Any, backends: Any) -> list[str]:
    """What a load balancer must not serve with: TLS half configured, keys in clear on a network."""
    if not isinstance(lb, Mapping) or not isinstance(backends, list):
        raise AnsibleFilterError("load_balancer_problems: expected the load balancer's variables and the backends")
    cert, key = lb.get("load_balancer_tls_certificate") or "", lb.get("load_balancer_tls_key") or ""
    ca, plain_ok = lb.get("load_balancer_gateway_ca") or "", str(lb.get("load_balancer_allow_plaintext")) == "True"
    bind = str(lb.get("load_balancer_bind_address", "0.0.0.0"))
    problems = []
    if bool(cert) != bool(key):
        problems.append("load_balancer_tls_certificate and load_balancer_tls_key: set both (the certificate from "
                        "the inventory, its key from the vault) or neither")  # fmt: skip
    elif cert:
        problems += _certificate_problems("load_balancer_tls_certificate", cert, "load_balancer_tls_key", key)
        problems += _vip_name_problems(cert, lb.get("load_balancer_vip"), lb.get("load_balancer_vip_name") or "")
    elif not _loopback(bind) and not plain_ok:
        problems.append(f"load_balancer_bind_address={bind}: plain HTTP on a network carries every API key and "
                        "prompt in clear; fix: load_balancer_tls_certificate and load_balancer_tls_key "
                        "(docs/serving-front.md: TLS), or load_balancer_allow_plaintext: true on purpose")  # fmt: skip
    if ca:
        problems += _certificate_problems("load_balancer_gateway_ca", ca)
    problems += _port_problems(lb, backends)
    for backend in backends:
        for server in backend.get("servers") or []:
            where = f"{server['name']} ({backend['model']})"
            if server.get("tls") and not ca:
                problems.append(f"{where} serves HTTPS (gateway_tls_cert) but load_balancer_gateway_ca is empty: "
                                "HAProxy could not verify it; fix: the CA that issued the gateways' "
                                "certificates in load_balancer_gateway_ca")  # fmt: skip
            if server.get("tls") and not cert and not plain_ok:
                problems.append(f"{where} serves HTTPS but the load balancer's frontends are plain HTTP, so keys "
                                "reach HAProxy in clear; fix: load_balancer_tls_certificate and "
                                "load_balancer_tls_key")  # fmt: skip
            if not server.get("tls") and ca:
                problems.append(f"{where} serves plain HTTP but load_balancer_gateway_ca is set: HAProxy would "
                                "speak TLS to it and find it down; fix: gateway_tls_cert and gateway_tls_key on "
                                "that host, or remove load_balancer_gateway_ca")  # fmt: skip
            host = str(server["address"]).rsplit(":", 1)[0]
            if _loopback(str(server.get("bind", "0.0.0.0"))) and not _loopback(host):
                problems.append(f"{where}: its gateway listens on {server['bind']} (gateway_bind_address) only, so "
                                f"HAProxy cannot reach it at {server['address']}; fix: gateway_bind_address 0.0.0.0 "
                                "or the address HAProxy reaches")  # fmt: skip
            if not server.get("tls") and cert and not _loopback(host) and not plain_ok:
                problems.append(f"{where}: HAProxy forwards to {server['address']} in plain HTTP, so every key "
                                "crosses that network in clear; fix: gateway_tls_cert and gateway_tls_key on the "
                                "host and load_balancer_gateway_ca, or load_balancer_allow_plaintext: true on "
                                "purpose")  # fmt: skip
    return problems


def _whole(value: Any, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError(f"load_balancer_key_map: {value!r} is not a whole number") from err


def _expires(value: Any, where: str) -> int | None:
    """A key's end (fleet_api_keys[].expires, read as the gateway's key file reads it) as UNIX time."""
    if value is None or value == "":
        return None
    try:
        return int(datetime.datetime.fromisoformat(key_expiry(value)).timestamp())
    except ValueError as err:
        raise AnsibleFilterError(f"load_balancer_key_map: {where}: expires: {err}") from err


def _models_answer(models: set[str]) -> str:
    """GET /v1/models in OpenAI's shape, without spaces (a map value)."""
    data = [{"id": m, "object": "model", "created": 0, "owned_by": "ftfleet"} for m in sorted(models)]
    return json.dumps({"object": "list", "data": data}, separators=(",", ":"))


def load_balancer_server_state(lines: Any, backend: Any, server: Any, weight_percent: Any = 100) -> dict[str, Any]:
    """One server's runtime state from HAProxy's `show servers state <backend>` (its lines): the
    admin state (0: ready; maint and drain are flags), the operational state (2: up), the current
    and configured weights, and whether it is ready at weight_percent of its configured weight (as
    `set weight N%` makes it: configured * N / 100). What a task that sets this state compares
    before and after, instead of the whole stats row, whose session counts move under load."""
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise AnsibleFilterError("load_balancer_server_state: expected the lines of `show servers state`")
    rows = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    found = [row for row in rows if len(row) > 8 and row[1] == backend and row[3] == server]
    if len(found) != 1:
        raise AnsibleFilterError(
            f"load_balancer_server_state: {len(found)} servers named {server!r} in backend {backend!r} "
            "(expected one; the serve stage's load balancer play writes them from the inventory)"
        )
    row = found[0]
    admin, operational, current, configured = (int(row[i]) for i in (6, 5, 7, 8))
    percent = whole_number(weight_percent, "weight_percent", "load_balancer_server_state")
    return {"admin_state": admin, "operational_state": operational, "weight": current, "configured_weight": configured,
            "ready": admin == 0 and current == configured * percent // 100}  # fmt: skip


def load_balancer_key_map(backends: Any, hostvars: Any, lb_count: Any = 1) -> list[str]:
    """HAProxy's map of API keys (see DOCUMENTATION); never a key, only its SHA-256."""
    if not isinstance(backends, list):
        raise AnsibleFilterError("load_balancer_key_map: expected the backends (load_balancer_backends)")
    share = max(_whole(lb_count, 1), 1)
    limits: dict[str, tuple[int, int, int]] = {}
    usable: dict[str, set[str]] = {}
    ends: dict[str, int] = {}
    for backend in backends:
        for server in backend["servers"]:
            v = hostvars[server["name"]]
            keys = v.get("gateway_api_keys") or v.get("fleet_api_keys") or []
            default_rate = _whole(v.get("gateway_rate_per_minute"), _whole(v.get("fleet_api_key_rate_per_minute"), 600))
            default_most = _whole(v.get("fleet_api_key_concurrent_requests"), 0)
            default_tokens = _whole(v.get("fleet_api_key_tokens_per_minute"), 0)
            for item in keys:
                if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
                    raise AnsibleFilterError(f"load_balancer_key_map: {server['name']}'s API keys must be "
                                             "{name, key, ...} mappings (preflight says which)")  # fmt: skip
                digest = hashlib.sha256(item["key"].encode()).hexdigest()
                usable.setdefault(digest, set())
                end = _expires(item.get("expires"), f"{server['name']}'s key {item.get('name')!r}")
                if end is not None:  # hosts that disagree: the earlier end
                    ends[digest] = min(end, ends.get(digest, end))
                models = item.get("models")
                if models is not None and backend["model"] not in models:
                    continue
                usable[digest].add(backend["model"])
                rate = -(-_whole(item.get("rate_per_minute"), default_rate) // share)
                most = -(-_whole(item.get("concurrent_requests"), default_most) // share)
                tokens = -(-_whole(item.get("tokens_per_minute"), default_tokens) // share)
                entry = f"{backend['backend']}:{digest}"
                if entry in limits:  # hosts of one model that disagree: the lower limit (0: no limit)
                    old_rate, old_most, old_tokens = limits[entry]
                    rate, most = min(rate, old_rate), min(most or old_most, old_most or most)
                    tokens = min(tokens or old_tokens, old_tokens or tokens)
                limits[entry] = (rate, most, tokens)
    lines = [f"{entry} {rate}:{most}:{tokens}" for entry, (rate, most, tokens) in sorted(limits.items())]
    lines += [f"models:{digest} {_models_answer(models)}" for digest, models in sorted(usable.items())]
    return lines + [f"expires:{digest} {end}" for digest, end in sorted(ends.items())]
