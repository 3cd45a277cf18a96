"""The serving front's filters: the gateway's inputs (keys, port, limits, TLS) as preflight reports
them, the key records the hosts store, the model's context length, HAProxy's backends."""

from __future__ import annotations

import hashlib

import pytest
from fleet_inputs import fleet_input_problems, gateway_problems
from ft_families import AnsibleFilterError
from gateway import gateway_key_records, model_context_length
from load_balancer import load_balancer_backends
from test_fleet_inputs import GOOD

KEY = "ftf-0123456789abcdef"
SERVING = {**GOOD, "fleet_gateway": True, "fleet_api_keys": [{"name": "alice", "key": KEY}]}


def test_a_host_with_a_key_has_no_gateway_problem():
    assert fleet_input_problems(SERVING) == []
    # the gateway off: no keys needed
    assert fleet_input_problems({**GOOD, "fleet_gateway": False, "fleet_api_keys": []}) == []


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"fleet_api_keys": []}, "fleet_api_keys=[]: the gateway needs at least one API key"),
        ({"fleet_api_keys": "ftf-key"}, "must be a list of {name, key, rate_per_minute} mappings"),
        ({"fleet_api_keys": [{"name": "a b", "key": KEY}]}, "fleet_api_keys[0] (a b): 'name' must be letters"),
        (
            {"fleet_api_keys": [{"name": "a", "key": KEY}, {"name": "a", "key": KEY + "x"}]},
            "the name 'a' is used twice",
        ),
        ({"fleet_api_keys": [{"name": "a", "key": KEY}, {"name": "b", "key": KEY}]}, "(b): the same key as another"),
        ({"fleet_api_keys": [{"name": "a", "key": "short"}]}, "(a): 'key' must be a string of at least 16"),
        ({"fleet_api_keys": [{"name": "a", "key": KEY, "rate_per_minute": 0}]}, "'rate_per_minute' must be a whole"),
        ({"fleet_api_keys": [{"name": "a", "key": KEY, "rpm": 5}]}, "unknown field(s) ['rpm']"),
        ({"gateway_port": 8001}, "gateway_port=8001: the same port as triton_server_grpc_port"),
        ({"gateway_port": 70000}, "gateway_port=70000: out of range (valid: 1-65535)"),
        ({"gateway_max_tokens": 4096, "gateway_context_length": 2048}, "gateway_max_tokens=4096: not below"),
        ({"gateway_max_tokens": 0}, "gateway_max_tokens=0: out of range"),
        ({"gateway_tls_cert": "/etc/ssl/gw.pem"}, "set both (a certificate and its key) or neither"),
        ({"gateway_tls_cert": "gw.pem", "gateway_tls_key": "/k.pem"}, "gateway_tls_cert='gw.pem': must be an absolute"),
        ({"gateway_bind_address": "any"}, "gateway_bind_address='any': not an IP address"),
        ({"fleet_gateway": "yes"}, "fleet_gateway='yes': must be true or false"),
    ],
)
def test_bad_gateway_inputs_are_named(overrides, problem):
    problems = fleet_input_problems({**SERVING, "triton_server_grpc_port": 8001, **overrides})
    assert any(problem in p for p in problems), problems
    assert not any(KEY in p for p in problems)  # a key never appears in a message


def test_anonymous_access_on_purpose_needs_no_key():
    assert gateway_problems({"gateway_api_keys": [], "gateway_allow_anonymous": True}) == []


def test_key_records_hold_hashes_and_rates():
    records = gateway_key_records(
        [{"name": "a", "key": KEY}, {"name": "b", "key": KEY + "b", "rate_per_minute": 5}], 600
    )
    assert records == [
        {"name": "a", "sha256": hashlib.sha256(KEY.encode()).hexdigest(), "rate_per_minute": 600},
        {"name": "b", "sha256": hashlib.sha256((KEY + "b").encode()).hexdigest(), "rate_per_minute": 5},
    ]
    with pytest.raises(AnsibleFilterError, match=r"keys\[0\] needs a 'name' and a non-empty 'key'") as err:
        gateway_key_records([{"name": "a", "key": ""}], 600)
    assert KEY not in str(err.value)
    with pytest.raises(AnsibleFilterError, match="default_rate must be"):
        gateway_key_records([], 0)


@pytest.mark.parametrize(
    ("config", "length"),
    [({"n_positions": 1024, "n_ctx": 1024}, 1024), ({"max_position_embeddings": 2048}, 2048),
     ({"seq_length": 4096}, 4096), ({"n_layer": 70}, 2048)],
)  # fmt: skip
def test_context_length_from_config_json(config, length):
    assert model_context_length(config, 2048) == length


def test_context_length_refuses_bad_input():
    with pytest.raises(AnsibleFilterError, match=r"expected a parsed config\.json"):
        model_context_length("{}", 2048)
    with pytest.raises(AnsibleFilterError, match="fallback must be"):
        model_context_length({}, 1)


HOSTVARS = {
    "n1": {"fleet_model": {"name": "tiny"}, "lb_member_address": "127.0.0.1:18080"},
    "n2": {"fleet_model": {"name": "tiny"}, "ansible_host": "gpu-2.example", "gateway_port": 9090},
    "n3": {"fleet_model": {"name": "llama"}},
    "idle": {"fleet_model": {}},
}


def test_one_backend_per_model_with_computed_and_given_ports():
    backends = load_balancer_backends(list(HOSTVARS), HOSTVARS, {"tiny": 18500}, 8090)
    assert backends == [
        {"model": "llama", "backend": "model_llama", "port": 8090, "servers": [{"name": "n3", "address": "n3:8080"}]},
        {"model": "tiny", "backend": "model_tiny", "port": 18500,
         "servers": [{"name": "n1", "address": "127.0.0.1:18080"}, {"name": "n2", "address": "gpu-2.example:9090"}]},
    ]  # fmt: skip


def test_two_models_on_one_port_are_refused():
    with pytest.raises(AnsibleFilterError, match="models 'llama' and 'tiny' both on port 8090"):
        load_balancer_backends(list(HOSTVARS), HOSTVARS, {"tiny": 8090}, 8090)
    with pytest.raises(AnsibleFilterError, match="not a port"):
        load_balancer_backends(list(HOSTVARS), HOSTVARS, {"tiny": 0}, 8090)
