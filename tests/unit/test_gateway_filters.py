"""The serving front's filters: the gateway's inputs (keys, port, limits, TLS) as preflight reports
them, the key records the hosts store, the model's context length, HAProxy's backends and what
preflight refuses of a load balancer's TLS settings."""

from __future__ import annotations

import datetime
import hashlib
import json

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from test_fleet_inputs import GOOD

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.gateway import (
    gateway_key_records,
    gateway_peers,
    gateway_probe_key,
    gateway_tls_file_problems,
    key_expiry,
    model_context_length,
)
from ftdomain.fleet.load_balancer import (
    load_balancer_backends,
    load_balancer_frontends,
    load_balancer_key_map,
    load_balancer_problems,
    tls_certificate_facts,
)
from ftdomain.inputs.checks import fleet_input_problems
from ftdomain.inputs.gateway import gateway_problems

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
        ({"fleet_api_keys": "ftf-key"}, "must be a list of {name, key, rate_per_minute, ...} mappings"),
        ({"fleet_api_keys": [{"name": "a b", "key": KEY}]}, "fleet_api_keys[0] (a b): 'name' must be letters"),
        (
            {"fleet_api_keys": [{"name": "a", "key": KEY}, {"name": "a", "key": KEY + "x"}]},
            "the name 'a' is used twice",
        ),
        ({"fleet_api_keys": [{"name": "a", "key": KEY}, {"name": "b", "key": KEY}]}, "(b): the same key as another"),
        ({"fleet_api_keys": [{"name": "a", "key": "short"}]}, "(a): 'key' must be a string of at least 16"),
        ({"fleet_api_keys": [{"name": "a", "key": KEY, "rate_per_minute": 0}]}, "'rate_per_minute' must be a whole"),
        ({"fleet_api_keys": [{"name": "a", "key": KEY, "rpm": 5}]}, "unknown field(s) ['rpm']"),
        (
            {"fleet_api_keys": [{"name": "a", "key": KEY, "concurrent_requests": -1}]},
            "(a): 'concurrent_requests' must be a whole number >= 0 (0: no limit)",
        ),
        ({"fleet_api_keys": [{"name": "a", "key": KEY, "models": "kogpt"}]}, "(a): 'models' must be a non-empty list"),
        ({"fleet_api_keys": [{"name": "a", "key": KEY, "models": []}]}, "(a): 'models' must be a non-empty list"),
        ({"fleet_api_keys": [{"name": "a", "key": KEY, "expires": "soon"}]}, "(a): 'expires': 'soon' is not"),
        (
            {"fleet_api_keys": [{"name": "a", "key": KEY, "expires": "2027-01-31T18:00"}]},
            "(a): 'expires': '2027-01-31T18:00' has no time zone; fix: end it with Z",
        ),
        (
            {"fleet_api_keys": [{"name": "a", "key": KEY, "models": ["other"]}]},
            "no key may use the model 'kogpt' now (each names other models or has expired)",
        ),
        (
            {"fleet_api_keys": [{"name": "a", "key": KEY, "expires": datetime.date(2020, 1, 1)}]},
            "no key may use the model 'kogpt' now",
        ),
        ({"fleet_api_key_rate_per_minute": 0}, "fleet_api_key_rate_per_minute=0: must be a whole number >= 1"),
        ({"fleet_api_key_concurrent_requests": "many"}, "fleet_api_key_concurrent_requests='many': must be a whole"),
        ({"gateway_port": 8001}, "gateway_port=8001: the same port as triton_server_grpc_port"),
        ({"gateway_port": 70000}, "gateway_port=70000: out of range (valid: 1-65535)"),
        ({"gateway_max_tokens": 4096, "gateway_context_length": 2048}, "gateway_max_tokens=4096: not below"),
        ({"gateway_max_tokens": 0}, "gateway_max_tokens=0: out of range"),
        ({"gateway_tls_cert": "/etc/ssl/gw.pem"}, "set both (a certificate and its key) or neither"),
        ({"gateway_tls_cert": "gw.pem", "gateway_tls_key": "/k.pem"}, "gateway_tls_cert='gw.pem': must be an absolute"),
        ({"gateway_bind_address": "any"}, "gateway_bind_address='any': not an IP address"),
        ({"fleet_gateway": "yes"}, "fleet_gateway='yes': must be true or false"),
        ({"gateway_continuations": -1}, "gateway_continuations=-1: out of range (valid: >= 0)"),
        ({"fleet_gateway_key": "short"}, "fleet_gateway_key: the fleet's key must be a string of at least 16"),
        ({"fleet_gateway_key": f" {KEY}"}, "fleet_gateway_key: the fleet's key must be a string of at least 16"),
        ({"gateway_peer_ca": "not a certificate"}, "gateway_peer_ca: not a PEM certificate"),
    ],
)
def test_bad_gateway_inputs_are_named(overrides, problem):
    problems = fleet_input_problems({**SERVING, "triton_server_grpc_port": 8001, **overrides})
    assert any(problem in p for p in problems), problems
    assert not any(KEY in p for p in problems)  # a key never appears in a message


def test_anonymous_access_on_purpose_needs_no_key():
    assert gateway_problems({"gateway_api_keys": [], "gateway_allow_anonymous": True}) == []


def test_a_key_for_this_model_that_has_not_expired_is_fine():
    keys = [{"name": "a", "key": KEY, "models": ["kogpt", "llama"], "expires": "2999-01-01T00:00:00Z",
             "concurrent_requests": 0}]  # fmt: skip
    assert fleet_input_problems({**SERVING, "fleet_api_keys": keys}) == []


@pytest.mark.parametrize(
    ("given", "moment"),
    [("2027-01-31", "2027-01-31T00:00:00+00:00"), (datetime.date(2027, 1, 31), "2027-01-31T00:00:00+00:00"),
     ("2027-01-31T18:00:00+09:00", "2027-01-31T09:00:00+00:00"), ("2027-01-31T18:00Z", "2027-01-31T18:00:00+00:00"),
     (datetime.datetime(2027, 1, 31, 18, 0), "2027-01-31T18:00:00+00:00")],
)  # fmt: skip
def test_expiry_is_a_moment_in_utc(given, moment):
    assert key_expiry(given) == moment


def test_the_probe_key_may_call_the_model_now():
    keys = [{"name": "old", "key": KEY + "1", "expires": "2027-01-01"},
            {"name": "other", "key": KEY + "2", "models": ["llama"]},
            {"name": "ok", "key": KEY + "3", "models": ["kogpt"]}]  # fmt: skip
    assert gateway_probe_key(keys, "kogpt", "2026-12-31T23:59:59+00:00") == KEY + "1"
    assert gateway_probe_key(keys, "kogpt", "2027-01-01T00:00:00+00:00") == KEY + "3"
    assert gateway_probe_key(keys, "llama", "2027-06-01T00:00:00+00:00") == KEY + "2"
    assert gateway_probe_key(keys[:2], "kogpt", "2027-06-01T00:00:00+00:00") == ""


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
    scoped = gateway_key_records([{"name": "c", "key": KEY, "models": ["kogpt"], "expires": "2027-01-31",
                                   "concurrent_requests": 4}], 600)  # fmt: skip
    assert scoped == [{"name": "c", "sha256": hashlib.sha256(KEY.encode()).hexdigest(), "rate_per_minute": 600,
                       "models": ["kogpt"], "expires": "2027-01-31T00:00:00+00:00"}]  # fmt: skip


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


def test_one_backend_per_model_and_one_endpoint_for_all_with_ports_of_their_own_as_an_option():
    backends = load_balancer_backends(list(HOSTVARS), HOSTVARS, {"tiny": 18500}, 8090)
    plain = {"tls": False, "bind": "0.0.0.0", "max_request_bytes": 65536, "slots": 0, "maxconn": 0}
    assert backends == [
        {"model": "llama", "backend": "model_llama", "port": None,
         "servers": [{"name": "n3", "address": "n3:8080", "tls_name": "n3", **plain}]},
        {"model": "tiny", "backend": "model_tiny", "port": 18500,
         "servers": [{"name": "n1", "address": "127.0.0.1:18080", "tls_name": "n1", **plain},
                     {"name": "n2", "address": "gpu-2.example:9090", "tls_name": "n2", **plain}]},
    ]  # fmt: skip
    # the one endpoint first (it routes: no backend of its own), then tiny's own port; llama has none
    assert load_balancer_frontends(backends, 8090) == [
        {"name": "fleet", "port": 8090, "backend": ""},
        {"name": "model_tiny", "port": 18500, "backend": "model_tiny"},
    ]
    assert load_balancer_frontends(load_balancer_backends(list(HOSTVARS), HOSTVARS), 8090) == [
        {"name": "fleet", "port": 8090, "backend": ""}
    ]
    # each gateway's body limit, which the one endpoint's buffers must hold
    hosts = {"n1": {**HOSTVARS["n1"], "gateway_max_request_bytes": 1048576}}
    assert load_balancer_backends(list(hosts), hosts)[0]["servers"][0]["max_request_bytes"] == 1048576


@pytest.mark.parametrize(
    ("hostvars", "slots"),
    [({}, 0),  # no bound where nothing says one
     ({"fleet_generation_slots": "1"}, 1),  # the fleet's, as templated text
     ({"fleet_generation_slots": 64, "gateway_max_in_flight": 8}, 8),  # the gateway's own first
     ({"fleet_generation_slots": 64, "gateway_max_in_flight": 0}, 0)],  # its 0 turns the bound off
)  # fmt: skip
def test_each_gateway_gets_at_most_what_it_runs(hostvars, slots):
    """HAProxy's maxconn per gateway is its slots: the model's queue is HAProxy's, fair between keys
    over every gateway; the gateway's own queue is for what comes past it (another load balancer)."""
    hosts = {"n1": {"fleet_model": {"name": "tiny"}, **hostvars}}
    server = load_balancer_backends(list(hosts), hosts)[0]["servers"][0]
    assert (server["slots"], server["maxconn"]) == (slots, slots)


def test_a_bound_that_is_not_a_whole_number_is_named():
    for bad, words in (("many", "not a whole number"), (-1, "out of range")):
        hosts = {"n1": {"fleet_model": {"name": "tiny"}, "gateway_max_in_flight": bad}}
        with pytest.raises(AnsibleFilterError, match=f"gateway_max_in_flight=.* on n1: {words}"):
            load_balancer_backends(list(hosts), hosts)


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_the_key_map_holds_each_models_keys_by_hash_with_their_share_of_the_limits():
    keys = [{"name": "a", "key": KEY + "a"},
            {"name": "b", "key": KEY + "b", "rate_per_minute": 21, "concurrent_requests": 3, "tokens_per_minute": 9001},
            {"name": "c", "key": KEY + "c", "models": ["llama"]}]  # fmt: skip
    hosts = {
        "n1": {"fleet_model": {"name": "tiny"}, "fleet_api_keys": keys, "fleet_api_key_concurrent_requests": 64},
        "n2": {
            "fleet_model": {"name": "tiny"},
            "fleet_api_keys": keys,
            "gateway_rate_per_minute": 100,
            "fleet_api_key_tokens_per_minute": 50000,
        },
        "n3": {"fleet_model": {"name": "llama"}, "gateway_api_keys": keys[2:], "fleet_api_key_rate_per_minute": 30},
    }
    backends = load_balancer_backends(list(hosts), hosts, {}, 8090)
    lines = load_balancer_key_map(backends, hosts, 1)
    # tiny: a at the lower default rate of its hosts (n2's 100 under 600) and n1's 64 at once (n2 sets
    # none: no limit, so n1's holds) and n2's 50000 tokens a minute (n1 sets none); b its own; c is not
    # for tiny. llama: only c, at n3's default rate.
    assert [line for line in lines if line.startswith("model_")] == sorted([
        f"model_tiny:{_sha(KEY + 'a')} 100:64:50000", f"model_tiny:{_sha(KEY + 'b')} 21:3:9001",
        f"model_llama:{_sha(KEY + 'c')} 30:0:0",
    ])  # fmt: skip
    # two load balancers: each enforces half, rounded up
    halves = dict(line.split(" ") for line in load_balancer_key_map(backends, hosts, 2))
    assert halves[f"model_tiny:{_sha(KEY + 'a')}"] == "50:32:25000"
    assert halves[f"model_tiny:{_sha(KEY + 'b')}"] == "11:2:4501"
    assert not any(KEY in line for line in lines)  # hashes only, never a key
    with pytest.raises(AnsibleFilterError, match="n1's API keys must be"):
        load_balancer_key_map(backends, {**hosts, "n1": {**hosts["n1"], "fleet_api_keys": ["ftf-key"]}}, 1)


def _listed(lines: list[str], key: str) -> list[str] | None:
    """The model ids of the one endpoint's GET /v1/models answer for a key, None if it has none."""
    for line in lines:
        entry, _, value = line.partition(" ")
        if entry == f"models:{_sha(key)}":
            assert " " not in value  # one word: HAProxy's map value
            answer = json.loads(value)
            assert answer["object"] == "list"
            assert all(m["object"] == "model" for m in answer["data"])
            return [m["id"] for m in answer["data"]]
    return None


def test_the_key_map_lists_each_keys_models_for_the_one_endpoint_and_its_end():
    keys = [{"name": "all", "key": KEY + "a"},
            {"name": "tiny-only", "key": KEY + "t", "models": ["tiny"], "expires": "2027-01-31T18:00:00+01:00"},
            {"name": "none-served", "key": KEY + "n", "models": ["gone"]}]  # fmt: skip
    hosts = {
        "n1": {"fleet_model": {"name": "tiny"}, "fleet_api_keys": keys},
        "n3": {"fleet_model": {"name": "llama"}, "fleet_api_keys": keys[:1]},
        "n4": {"fleet_model": {"name": "llama"}, "fleet_api_keys": [{**keys[0], "expires": "2027-06-01"}]},
    }
    lines = load_balancer_key_map(load_balancer_backends(list(hosts), hosts), hosts, 2)
    assert _listed(lines, KEY + "a") == ["llama", "tiny"]
    assert _listed(lines, KEY + "t") == ["tiny"]
    assert _listed(lines, KEY + "n") == []  # a key the hosts take, for no model served: valid, lists nothing
    assert _listed(lines, "ftf-nobody") is None  # no line: the endpoint says invalid_api_key
    ends = dict(line.split(" ") for line in lines if line.startswith("expires:"))
    # 17:00 UTC; where hosts disagree (n4 ends "all" on 2027-06-01, the others never) the end holds
    assert ends == {f"expires:{_sha(KEY + 't')}": str(int(datetime.datetime(2027, 1, 31, 17, tzinfo=datetime.UTC)
                                                          .timestamp())),
                    f"expires:{_sha(KEY + 'a')}": str(int(datetime.datetime(2027, 6, 1, tzinfo=datetime.UTC)
                                                          .timestamp()))}  # fmt: skip
    assert not any(KEY in line for line in lines)
    bad = {"n1": {"fleet_model": {"name": "tiny"}, "fleet_api_keys": [{**keys[0], "expires": "2027-01-31T18:00"}]}}
    with pytest.raises(AnsibleFilterError, match=r"n1's key 'all': expires: .*no time zone"):
        load_balancer_key_map(load_balancer_backends(["n1"], bad), bad)


def test_a_gateway_with_a_certificate_is_a_tls_server_verified_by_its_name():
    hosts = {
        "n1": {"fleet_model": {"name": "tiny"}, "gateway_tls_cert": "/etc/ftfleet/tls/gateway.crt"},
        "n2": {"fleet_model": {"name": "tiny"}, "gateway_tls_cert": "/c.crt", "gateway_tls_name": "gw2.example"},
    }
    servers = load_balancer_backends(list(hosts), hosts)[0]["servers"]
    assert [(s["tls"], s["tls_name"]) for s in servers] == [(True, "n1"), (True, "gw2.example")]


def test_two_models_on_one_port_or_a_model_on_the_one_endpoints_port_are_refused():
    with pytest.raises(AnsibleFilterError, match="load_balancer_ports\\['tiny'\\]=8091 is also model 'llama'"):
        load_balancer_backends(list(HOSTVARS), HOSTVARS, {"tiny": 8091, "llama": 8091}, 8090)
    with pytest.raises(AnsibleFilterError, match="=8090 is also load_balancer_port, the one endpoint"):
        load_balancer_backends(list(HOSTVARS), HOSTVARS, {"tiny": 8090}, 8090)
    with pytest.raises(AnsibleFilterError, match="not a port"):
        load_balancer_backends(list(HOSTVARS), HOSTVARS, {"tiny": 0}, 8090)
    with pytest.raises(AnsibleFilterError, match="load_balancer_port=70000: not a port"):
        load_balancer_backends(list(HOSTVARS), HOSTVARS, {}, 70000)


def test_the_metrics_or_peers_port_on_a_frontends_port_is_a_problem():
    lab = {"load_balancer_bind_address": "127.0.0.1", "load_balancer_port": 18500, "load_balancer_metrics_port": 18405}
    backends = [{**_backends(False, "127.0.0.1:18080")[0], "port": 18501}]
    assert load_balancer_problems(lab, backends) == []
    clash = load_balancer_problems({**lab, "load_balancer_metrics_port": 18500}, backends)
    assert clash == ["load_balancer_metrics_port=18500 is also load_balancer_port (the one endpoint): two listeners "
                     "on one port; fix: another port for one of them"]  # fmt: skip
    # the same clash where a value comes as text (an inventory's quoted number)
    assert load_balancer_problems({**lab, "load_balancer_port": "18500", "load_balancer_metrics_port": "18500"},
                                  backends) == clash  # fmt: skip
    assert "is also load_balancer_ports['m']" in load_balancer_problems({**lab, "load_balancer_metrics_port": 18501},
                                                                       backends)[0]  # fmt: skip
    # the peers' port matters only where the load balancers share a virtual address
    peers = {**lab, "load_balancer_peers_port": 18500}
    assert load_balancer_problems(peers, backends) == []
    vip = {**peers, "load_balancer_vip": "127.0.0.100/8"}
    assert load_balancer_problems(vip, backends)[0].startswith("load_balancer_peers_port=18500 is also")


def _pair(name: str, days: float = 30, issuer: tuple | None = None) -> tuple[str, str]:
    """A certificate for DNS:name valid `days` from now (negative: expired), and its key, as PEM text."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    signer_name, signer_key = issuer or (subject, key)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(signer_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=2))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(signer_key, hashes.SHA256()))  # fmt: skip
    pem = serialization.PrivateFormat.PKCS8
    return (cert.public_bytes(serialization.Encoding.PEM).decode(),
            key.private_bytes(serialization.Encoding.PEM, pem, serialization.NoEncryption()).decode())  # fmt: skip


CERT, KEY_PEM = _pair("lb.example")
CA, _ = _pair("ca.example")
TLS = {"load_balancer_tls_certificate": CERT, "load_balancer_tls_key": KEY_PEM, "load_balancer_bind_address": "0.0.0.0"}


def _backends(tls: bool, address: str = "gpu-1.example:8080") -> list[dict]:
    return [{"model": "m", "servers": [{"name": "gpu-1", "address": address, "tls": tls, "tls_name": "gpu-1"}]}]


def test_tls_on_both_hops_passes():
    assert load_balancer_problems({**TLS, "load_balancer_gateway_ca": CA}, _backends(True)) == []


def test_the_lab_plain_on_loopback_passes():
    lab = {"load_balancer_bind_address": "127.0.0.1"}
    assert load_balancer_problems(lab, _backends(False, "127.0.0.1:18080")) == []


@pytest.mark.parametrize(
    ("lb", "tls", "address", "words"),
    [
        ({"load_balancer_bind_address": "0.0.0.0"}, False, "127.0.0.1:1",
         "load_balancer_bind_address=0.0.0.0: plain HTTP on a network"),
        ({"load_balancer_bind_address": "10.1.2.3"}, False, "127.0.0.1:1", "or load_balancer_allow_plaintext: true"),
        ({**TLS, "load_balancer_tls_key": ""}, False, "127.0.0.1:1", "set both"),
        ({**TLS}, True, "gpu:1", "load_balancer_gateway_ca is empty: HAProxy could not verify it"),
        ({**TLS, "load_balancer_gateway_ca": CA}, False, "gpu:1", "serves plain HTTP but load_balancer_gateway_ca"),
        ({**TLS}, False, "gpu-1.example:8080", "HAProxy forwards to gpu-1.example:8080 in plain HTTP"),
        ({"load_balancer_bind_address": "127.0.0.1", "load_balancer_gateway_ca": CA}, True, "gpu:1",
         "the load balancer's frontends are plain HTTP"),
        ({**TLS, "load_balancer_tls_key": _pair("other")[1]}, False, "127.0.0.1:1",
         "not the key of load_balancer_tls_certificate"),
        ({**TLS, "load_balancer_tls_certificate": _pair("lb", days=-1)[0]}, False, "127.0.0.1:1", "expired on"),
        ({**TLS, "load_balancer_tls_certificate": "-----BEGIN PRIVATE KEY-----"}, False, "127.0.0.1:1",
         "not a PEM certificate"),
        ({**TLS, "load_balancer_tls_key": "secret words"}, False, "127.0.0.1:1", "not an unencrypted PEM private key"),
        ({**TLS, "load_balancer_gateway_ca": "nonsense"}, True, "gpu:1", "load_balancer_gateway_ca: not a PEM"),
    ],
)  # fmt: skip
def test_half_configured_tls_and_plain_networks_are_refused_with_the_fix(lb, tls, address, words):
    problems = load_balancer_problems(lb, _backends(tls, address))
    assert any(words in p for p in problems), problems
    assert not any("secret words" in p or "PRIVATE KEY-----\nM" in p for p in problems)  # never the key's text


def test_plain_on_purpose_is_allowed():
    lb = {"load_balancer_bind_address": "0.0.0.0", "load_balancer_allow_plaintext": True}
    assert load_balancer_problems(lb, _backends(False)) == []
    assert load_balancer_problems({**TLS, "load_balancer_allow_plaintext": True}, _backends(False)) == []


def test_certificate_facts_count_the_days_left():
    facts = tls_certificate_facts(_pair("lb.example", days=10.5)[0])
    assert (facts["names"], facts["days_left"]) == (["lb.example"], 10)
    assert facts["subject"] == "CN=lb.example"
    with pytest.raises(AnsibleFilterError, match="not a PEM certificate"):
        tls_certificate_facts("")


def _stat(path: str, owner: str, group: str, mode: str) -> dict:
    bits = int(mode, 8)
    return {"path": path, "pw_name": owner, "gr_name": group, "mode": mode,
            "rusr": bool(bits & 0o400), "rgrp": bool(bits & 0o040), "roth": bool(bits & 0o004)}  # fmt: skip


def test_the_gateways_user_must_read_its_tls_files_and_no_one_else_the_key():
    good = [_stat("/c.crt", "root", "root", "0644"), _stat("/c.key", "root", "ftgateway", "0640")]
    assert gateway_tls_file_problems(good, "ftgateway", "/c.key") == []
    root_only = gateway_tls_file_problems([_stat("/c.key", "root", "root", "0600")], "ftgateway", "/c.key")
    assert root_only == ["/c.key (root:root 0600): the gateway's user ftgateway cannot read it; "
                         "fix: chgrp ftgateway /c.key; chmod 0640 /c.key"]  # fmt: skip
    open_key = gateway_tls_file_problems([_stat("/c.key", "root", "root", "0644")], "ftgateway", "/c.key")
    assert open_key == ["/c.key: the private key is readable by every user of the host; fix: chmod 0640 /c.key "
                        "(group ftgateway)"]  # fmt: skip


def test_a_gateway_bound_to_loopback_behind_a_load_balancer_elsewhere_is_refused():
    """docs/serving-front.md: gateway_bind_address is where HAProxy on another host must reach it."""
    loopback = {"fleet_model": {"name": "tiny"}, "gateway_bind_address": "127.0.0.1"}
    hosts = {
        "n1": {**loopback, "ansible_host": "gpu-1.example"},
        "n2": {**loopback, "lb_member_address": "127.0.0.1:18080"},
    }
    lb = {"load_balancer_bind_address": "127.0.0.1"}
    problems = load_balancer_problems(lb, load_balancer_backends(list(hosts), hosts))
    assert problems == [
        "n1 (tiny): its gateway listens on 127.0.0.1 (gateway_bind_address) only, so HAProxy cannot reach it at "
        "gpu-1.example:8080; fix: gateway_bind_address 0.0.0.0 or the address HAProxy reaches"
    ]  # n2: HAProxy reaches it on loopback (the lab's published ports)


def test_a_virtual_address_must_be_named_by_the_certificate():
    """Clients of load_balancer_vip check the certificate against that address or its DNS name."""
    vip = {**TLS, "load_balancer_gateway_ca": CA, "load_balancer_vip": "10.0.0.100/24"}
    problems = load_balancer_problems(vip, _backends(True))
    assert problems == ["load_balancer_tls_certificate names lb.example, not the virtual address 10.0.0.100 that "
                        "clients use (load_balancer_vip), so they would refuse it; fix: a certificate whose subject "
                        "alternative names include it"]  # fmt: skip
    assert load_balancer_problems({**vip, "load_balancer_vip_name": "lb.example"}, _backends(True)) == []
    named = {**vip, "load_balancer_vip_name": "api.example"}
    assert "10.0.0.100 or load_balancer_vip_name=api.example" in load_balancer_problems(named, _backends(True))[0]


def test_the_peers_are_the_other_hosts_of_the_model_at_their_addresses():
    hostvars = {
        "a": {"fleet_model": {"name": "kogpt"}, "ansible_host": "10.0.0.1"},
        "b": {"fleet_model": {"name": "kogpt"}, "ansible_host": "10.0.0.2", "gateway_port": 8443,
              "gateway_tls_cert": "/etc/ftfleet/tls/gateway.crt"},
        "c": {"fleet_model": {"name": "kogpt"}, "gateway_peer_address": "172.30.214.12:8080"},
        "d": {"fleet_model": {"name": "llama-7b"}, "ansible_host": "10.0.0.4"},
        "e": {"fleet_model": {"name": "kogpt"}, "gateway_tls_cert": "/c.pem", "gateway_tls_name": "e.example.com"},
        "lb": {},
    }  # fmt: skip
    hosts = list(hostvars)
    assert gateway_peers(hosts, hostvars, "a") == [
        {"url": "http://172.30.214.12:8080"},
        {"url": "https://10.0.0.2:8443", "tls_name": "b"},
        {"url": "https://e:8080", "tls_name": "e.example.com"},
    ]
    assert gateway_peers(hosts, hostvars, "d") == []  # the model's only host
    assert gateway_peers(hosts, hostvars, "lb") == []  # no model
    with pytest.raises(AnsibleFilterError, match="expected a list of hosts"):
        gateway_peers("a,b", hostvars, "a")


def test_a_slice_that_slices_nothing_is_refused():
    assert fleet_input_problems({**SERVING, "gateway_slice_tokens": 16, "gateway_max_tokens": 512}) == []
    assert fleet_input_problems({**SERVING, "gateway_slice_tokens": 0, "gateway_max_tokens": 512}) == []
    problems = fleet_input_problems({**SERVING, "gateway_slice_tokens": 512, "gateway_max_tokens": 512})
    assert problems == [next(p for p in problems if p.startswith("gateway_slice_tokens=512: not below"))]
    assert "gateway_slice_tokens=-1" in " ".join(fleet_input_problems({**SERVING, "gateway_slice_tokens": -1}))
