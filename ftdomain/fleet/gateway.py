"""What the gateway role writes: the API keys as hashes, and the model's context length."""

from __future__ import annotations

import datetime
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_sequence_length")


def _iso_moment(text: str) -> datetime.date | datetime.datetime | None:
    """An ISO 8601 date, or date and time ("Z" for UTC allowed), or None."""
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return datetime.date.fromisoformat(text)
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None


def key_expiry(value: Any) -> str:
    """fleet_api_keys[].expires -> the moment as ISO 8601 in UTC ("+00:00", which every Python 3
    parses). YAML gives a date or a datetime for unquoted values; a date alone (either way) means
    00:00 UTC of that day, and a time needs its zone. Raises ValueError saying what is wrong."""
    moment = _iso_moment(value.strip()) if isinstance(value, str) else value
    if isinstance(moment, datetime.datetime) and moment.tzinfo is None:
        if isinstance(value, str):
            raise ValueError(f"{value!r} has no time zone; fix: end it with Z (UTC) or +HH:MM")
        moment = moment.replace(tzinfo=datetime.UTC)  # a YAML timestamp without a zone is UTC (YAML 1.1)
    if isinstance(moment, datetime.date) and not isinstance(moment, datetime.datetime):
        moment = datetime.datetime(moment.year, moment.month, moment.day, tzinfo=datetime.UTC)
    if not isinstance(moment, datetime.datetime):
        raise ValueError(f"{value!r} is not a date or a date and time (ISO 8601, e.g. 2027-01-31 or 2027-01-31T18:00Z)")
    return moment.astimezone(datetime.UTC).isoformat()


def gateway_key_records(keys: Any, default_rate: Any) -> list[dict[str, Any]]:
    if not isinstance(keys, list) or not all(isinstance(k, Mapping) for k in keys):
        raise AnsibleFilterError("gateway_key_records: expected a list of {name, key, rate_per_minute} mappings")
    if not isinstance(default_rate, int) or isinstance(default_rate, bool) or default_rate < 1:
        raise AnsibleFilterError(f"gateway_key_records: default_rate must be a whole number >= 1, got {default_rate!r}")
    records = []
    for i, item in enumerate(keys):
        key = item.get("key")
        if not isinstance(key, str) or not key or not isinstance(item.get("name"), str):
            # Never the key itself in a message: only its position and name.
            raise AnsibleFilterError(f"gateway_key_records: keys[{i}] needs a 'name' and a non-empty 'key'")
        record = {"name": item["name"], "sha256": hashlib.sha256(key.encode()).hexdigest(),
                  "rate_per_minute": item.get("rate_per_minute", default_rate)}  # fmt: skip
        if item.get("models") is not None:
            record["models"] = list(item["models"])
        if item.get("expires") is not None:
            try:
                record["expires"] = key_expiry(item["expires"])
            except ValueError as err:
                raise AnsibleFilterError(f"gateway_key_records: keys[{i}] ({item['name']}): expires: {err}") from err
        records.append(record)
    return records


def gateway_probe_key(keys: Any, model: Any, now: Any = None) -> str:
    """The first key that may call `model` now (its models, its expiry), for the role's own
    requests; "" when there is none (a gateway without keys)."""
    moment = datetime.datetime.now(datetime.UTC) if now is None else datetime.datetime.fromisoformat(now)
    for item in keys if isinstance(keys, list) else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            continue
        if item.get("models") is not None and model not in item["models"]:
            continue
        if item.get("expires") is not None and datetime.datetime.fromisoformat(key_expiry(item["expires"])) <= moment:
            continue
        return item["key"]
    return ""


def model_context_length(config: Any, fallback: Any) -> int:
    if not isinstance(config, Mapping):
        raise AnsibleFilterError(f"model_context_length: expected a parsed config.json, got {type(config).__name__}")
    for name in CONTEXT_KEYS:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            return value
    if not isinstance(fallback, int) or isinstance(fallback, bool) or fallback < 2:
        raise AnsibleFilterError(f"model_context_length: fallback must be a whole number >= 2, got {fallback!r}")
    return fallback


# Triton's gRPC stream says that a request is complete (the response parameter
# triton_final_response, asked for with enable_empty_final_response) from release 23.06 on
# (triton-inference-server/server PR 5878, documented for 23.06 in PR 5965); the FT backend marks
# a decoupled answer's last response only so (TRITONSERVER_RESPONSE_COMPLETE_FINAL on it).
FINAL_RESPONSE_FROM = (23, 6)


def triton_final_response(version: Any) -> bool:
    """Whether a Triton release ("23.04", "23.06-py3") marks a decoupled answer's last response.
    An unknown release (an archive's, a tag of one's own) counts as not: the gateway then reads
    the end of an answer from the answer, which holds on every release."""
    text = version.strip().removesuffix("-py3") if isinstance(version, str) else ""
    match = re.fullmatch(r"(\d{2})\.(\d{2})", text)
    return match is not None and (int(match[1]), int(match[2])) >= FINAL_RESPONSE_FROM


def gateway_tls_file_problems(stats: Any, user: Any, key_path: Any) -> list[str]:
    """From the stat results of the certificate and key: what the gateway's user cannot read,
    and a key that every user can."""
    if not isinstance(stats, list) or not all(isinstance(s, Mapping) for s in stats):
        raise AnsibleFilterError("gateway_tls_file_problems: expected a list of stat results")
    problems = []
    for st in stats:
        path = st.get("path", "?")
        readable = ((st.get("pw_name") == user and st.get("rusr")) or (st.get("gr_name") == user and st.get("rgrp"))
                    or st.get("roth"))  # fmt: skip
        if not readable:
            problems.append(f"{path} ({st.get('pw_name')}:{st.get('gr_name')} {st.get('mode')}): the gateway's "
                            f"user {user} cannot read it; fix: chgrp {user} {path}; chmod 0640 {path}")  # fmt: skip
        if path == key_path and st.get("roth"):
            problems.append(f"{path}: the private key is readable by every user of the host; fix: chmod 0640 {path} "
                            f"(group {user})")  # fmt: skip
    return problems


def gateway_peers(hosts: Any, hostvars: Any, me: Any) -> list[dict[str, str]]:
    """The other hosts' gateways of `me`'s model (fleet_model.name), where its gateway continues a
    generation whose tritonserver failed: [{url, tls_name}], sorted. A host's address is its
    gateway_peer_address, else its ansible_host (or inventory name) and gateway_port; https where
    it serves TLS (gateway_tls_cert), verified as gateway_tls_name (or its inventory name)."""
    if not isinstance(hosts, list | tuple):
        raise AnsibleFilterError(f"gateway_peers: expected a list of hosts, got {type(hosts).__name__}")
    own = hostvars[me].get("fleet_model") or {}
    model = own.get("name") if isinstance(own, Mapping) else None
    if not model:
        return []
    peers = []
    for host in hosts:
        v = hostvars[host]
        theirs = v.get("fleet_model") or {}
        if host == me or not isinstance(theirs, Mapping) or theirs.get("name") != model:
            continue
        address = v.get("gateway_peer_address") or f"{v.get('ansible_host') or host}:{v.get('gateway_port') or 8080}"
        if v.get("gateway_tls_cert"):
            peers.append({"url": f"https://{address}", "tls_name": str(v.get("gateway_tls_name") or host)})
        else:
            peers.append({"url": f"http://{address}"})
    return sorted(peers, key=lambda p: p["url"])
