"""What the gateway role writes: the API keys as hashes, and the model's context length."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gateway_key_records
short_description: API keys -> what the hosts store of them (name, SHA-256, rate)
description:
  - Takes fleet_api_keys ([{name, key, rate_per_minute}]) and returns one record per key with
    the key's SHA-256 (hex) in place of the key, and its rate (the default rate where it sets none).
    ftgateway hashes a presented key the same way and compares.
  - model_context_length reads a Hugging Face config.json and returns the number of positions
    the model was trained for (max_position_embeddings, n_positions, n_ctx, seq_length), or the
    fallback where it names none (ALiBi models such as BLOOM).
options:
  _input:
    description: The keys (gateway_key_records) or the parsed config.json (model_context_length).
    required: true
  default_rate:
    description: Requests per minute for keys without rate_per_minute.
    type: int
"""

EXAMPLES = r"""
- name: Write the hashes
  ansible.builtin.copy:
    content: "{{ {'keys': fleet_api_keys | gateway_key_records(600)} | to_json }}"
    dest: /etc/ftfleet/gateway/model.keys.json
    mode: "0640"
  no_log: true
"""

RETURN = r"""
_value:
  description: "[{name, sha256, rate_per_minute}] (gateway_key_records); an int (model_context_length)."
  type: raw
"""

import hashlib
from collections.abc import Mapping
from typing import Any

from ft_families import AnsibleFilterError

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length", "max_sequence_length")


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
        records.append({"name": item["name"], "sha256": hashlib.sha256(key.encode()).hexdigest(),
                        "rate_per_minute": item.get("rate_per_minute", default_rate)})  # fmt: skip
    return records


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


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"gateway_key_records": gateway_key_records, "model_context_length": model_context_length,
                "gateway_tls_file_problems": gateway_tls_file_problems}  # fmt: skip
