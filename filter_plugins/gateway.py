"""Ansible's filters of ftdomain.fleet.gateway: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gateway_key_records
short_description: API keys -> what the hosts store of them (name, SHA-256, rate, scope, expiry)
description:
  - Takes fleet_api_keys ([{name, key, rate_per_minute, concurrent_requests, models, expires}])
    and returns one record per key with the key's SHA-256 (hex) in place of the key, its rate (the
    default rate where it sets none), and its models and expiry where it sets them (expires as
    ISO 8601 in UTC; a date alone means 00:00 UTC of that day). ftgateway hashes a presented key
    the same way and compares. concurrent_requests is the load balancers' (load_balancer_key_map).
  - gateway_probe_key returns the first key that may call the given model now (its models, its
    expiry), for the role's own requests, or "" when there is none.
  - gateway_peers takes the hosts (groups['gpu_hosts']), hostvars and this host's name and returns
    the other hosts' gateways of this host's model (fleet_model.name) as [{url, tls_name}]: where
    the gateway continues a generation whose tritonserver failed. A host's address is its
    gateway_peer_address, else its ansible_host (or inventory name) and gateway_port; https, with
    tls_name its gateway_tls_name, where it sets gateway_tls_cert.
  - model_context_length reads a Hugging Face config.json and returns the number of positions
    the model was trained for (max_position_embeddings, n_positions, n_ctx, seq_length), or the
    fallback where it names none (ALiBi models such as BLOOM).
  - triton_final_response says whether a Triton release ("23.04", "23.06-py3") marks a decoupled
    answer's last response (triton_final_response, from 23.06 on); an unknown release counts as
    not, and the gateway then reads the end of an answer from the answer itself.
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
  description: >-
    "[{name, sha256, rate_per_minute[, models][, expires]}]" (gateway_key_records); an int
    (model_context_length); a key or "" (gateway_probe_key); "[{url[, tls_name]}]" (gateway_peers).
  type: raw
"""

from typing import Any

from ftdomain.fleet.gateway import (
    gateway_key_records,
    gateway_peers,
    gateway_probe_key,
    gateway_tls_file_problems,
    model_context_length,
    triton_final_response,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gateway_key_records": gateway_key_records,
            "model_context_length": model_context_length,
            "gateway_tls_file_problems": gateway_tls_file_problems,
            "gateway_probe_key": gateway_probe_key,
            "gateway_peers": gateway_peers,
            "triton_final_response": triton_final_response,
        }
