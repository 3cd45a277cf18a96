"""Ansible's filters of ftdomain.fleet.load_balancer: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: load_balancer_backends
short_description: One backend (its hosts' gateways) per served model, and the frontends that reach them
description:
  - Takes a list of host names (groups.gpu_hosts) and hostvars; every host with a fleet_model
    joins the backend of its model (named model_<name>), as a server named after the host at
    lb_member_address, or <ansible_host or the host's name>:<gateway_port or 8080>.
  - Every model is served on one port, port (load_balancer_port), routed by the request's "model"
    (load_balancer_frontends). A model named in ports also gets a port of its own. Refuses two
    models on one port, a model on the one endpoint's port and a port out of range.
  - A server whose host sets gateway_tls_cert is marked tls, with the name HAProxy verifies in its
    certificate (gateway_tls_name, else the host's inventory name); max_request_bytes is its
    gateway's body limit (gateway_max_request_bytes, else 65536).
  - load_balancer_frontends takes the backends and the one endpoint's port and returns the
    frontends, the one endpoint (name fleet, no backend: it routes) first, then each model's own.
  - load_balancer_problems takes a load balancer's variables and the backends, and returns what
    preflight refuses (TLS half configured, plain HTTP on a network without
    load_balancer_allow_plaintext, certificates that do not parse, match or have expired, a
    certificate that names neither load_balancer_vip nor load_balancer_vip_name, a frontend port that
    is also the metrics or the peers port).
  - tls_certificate_facts reads a PEM certificate: subject, names, notAfter, days left.
  - load_balancer_server_state reads one server's admin and operational state and weights from
    the lines of HAProxy's `show servers state`, and whether it is ready at a percent of its
    configured weight (what role lb_ready compares, not the stats row's live session counts).
  - load_balancer_key_map takes the backends, hostvars and the number of load balancers, and
    returns the lines of HAProxy's map of API keys, by their SHA-256 only. Per-key limits,
    "<backend>:<SHA-256> <rate>:<most>:<tokens>": for each model, every key its hosts take
    (gateway_api_keys, else fleet_api_keys) that may use it (models), with its requests per
    minute (rate_per_minute, else the host's gateway_rate_per_minute, else
    fleet_api_key_rate_per_minute, else 600), concurrent requests (concurrent_requests, else
    fleet_api_key_concurrent_requests, else 0 = no limit) and tokens per minute (tokens_per_minute,
    else fleet_api_key_tokens_per_minute, else 0 = no limit), each divided among the load balancers
    (rounded up); where a model's hosts disagree, the lower limit holds. The one endpoint's
    GET /v1/models answer per key, "models:<SHA-256> <JSON>": every served model the key may use
    (an empty list for a key that the hosts take but may use none of them). A key's end,
    "expires:<SHA-256> <UNIX time>", where it has one.
options:
  _input:
    description: Host names.
    type: list
    required: true
  hostvars:
    description: Ansible's hostvars.
    type: dict
    required: true
  ports:
    description: Model name -> a port of its own, besides the one endpoint.
    type: dict
  port:
    description: The one endpoint's port, which serves every model.
    type: int
"""

EXAMPLES = r"""
- name: Show the backends
  ansible.builtin.debug:
    msg: "{{ groups.gpu_hosts | load_balancer_backends(hostvars, {}, 8090) | load_balancer_frontends(8090) }}"
"""

RETURN = r"""
_value:
  description: >-
    "[{model, backend, port (its own, or null), servers: [{name, address, tls, tls_name, bind,
    max_request_bytes}]}], sorted by model" (load_balancer_backends); "[{name, port, backend
    ('' for the one endpoint)}]" (load_balancer_frontends); a list of problems
    (load_balancer_problems); a dict (tls_certificate_facts); a list of lines
    (load_balancer_key_map).
  type: list
  elements: dict
"""

from typing import Any

from ftdomain.fleet.load_balancer import (
    load_balancer_backends,
    load_balancer_frontends,
    load_balancer_key_map,
    load_balancer_problems,
    load_balancer_server_state,
    tls_certificate_facts,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "load_balancer_backends": load_balancer_backends,
            "load_balancer_frontends": load_balancer_frontends,
            "load_balancer_problems": load_balancer_problems,
            "tls_certificate_facts": tls_certificate_facts,
            "load_balancer_key_map": load_balancer_key_map,
            "load_balancer_server_state": load_balancer_server_state,
        }
