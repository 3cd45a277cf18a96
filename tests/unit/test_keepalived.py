"""Two load balancers sharing virtual addresses (keepalived): each one's plan, and every problem
preflight refuses, from the inventory."""

from __future__ import annotations

import pytest

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.keepalived import keepalived_instances, keepalived_plan, keepalived_problems, load_balancer_peers

PAIR = {
    "lb-a": {"ansible_host": "10.0.0.11", "load_balancer_vip": "10.0.0.100/24"},
    "lb-b": {"ansible_host": "10.0.0.12", "load_balancer_vip": "10.0.0.100/24"},
}


def problems(hostvars, host="lb-a", inventory=None):
    return keepalived_problems(sorted(hostvars), hostvars, host, inventory)


def test_one_address_or_a_list_makes_one_instance_each_with_its_router_id():
    assert keepalived_instances("") == []
    assert keepalived_instances("10.0.0.100/24") == [
        {"name": "ftfleet_vip_0", "address": "10.0.0.100", "prefix": 24, "router_id": 51}]  # fmt: skip
    two = keepalived_instances(["10.0.0.100/24", "10.0.1.100/25"], 60)
    assert [(i["address"], i["prefix"], i["router_id"]) for i in two] == [
        ("10.0.0.100", 24, 60),
        ("10.0.1.100", 25, 61),
    ]
    with pytest.raises(AnsibleFilterError, match="an IPv4 address with its prefix"):
        keepalived_instances("10.0.0.100")


def test_the_plan_gives_priorities_by_name_and_the_others_as_peers():
    a = keepalived_plan(["lb-b", "lb-a"], PAIR, "lb-a")
    b = keepalived_plan(["lb-b", "lb-a"], PAIR, "lb-b")
    assert (a["address"], a["priority"], a["peers"]) == ("10.0.0.11", 200, ["10.0.0.12"])
    assert (b["address"], b["priority"], b["peers"]) == ("10.0.0.12", 190, ["10.0.0.11"])
    assert a["instances"] == b["instances"]
    found = {"lb-a": "10.0.0.21", "lb-b": "10.0.0.22"}  # from the hosts' facts
    named = {h: {**v, "ansible_host": f"{h}.example.com", "ansible_default_ipv4": {"address": found[h]}}
             for h, v in PAIR.items()}  # fmt: skip
    assert keepalived_plan(list(named), named, "lb-a")["peers"] == ["10.0.0.22"]
    chosen = {**PAIR, "lb-b": {**PAIR["lb-b"], "keepalived_priority": 250, "keepalived_address": "10.0.0.13"}}
    assert keepalived_plan(list(chosen), chosen, "lb-b")["priority"] == 250
    assert keepalived_plan(list(chosen), chosen, "lb-a")["peers"] == ["10.0.0.13"]


def test_a_valid_pair_and_no_address_have_no_problem():
    assert problems(PAIR) == []
    assert problems({"lb-a": {"ansible_host": "10.0.0.11"}}) == []  # keepalived off


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"lb-a": {"load_balancer_vip": "10.0.0.100"}}, "an IPv4 address with its prefix"),
        ({"lb-a": {"load_balancer_vip": "10.0.9.100/24"}}, "lb-a's address 10.0.0.11 is not in 10.0.9.0/24"),
        ({"lb-a": {"load_balancer_vip": "10.0.0.12/24"}}, "10.0.0.12 is lb-b's own address"),
        ({"lb-a": {"keepalived_router_id": 300}}, "keepalived_router_id=300: with 1 address(es) the ids run 300-300"),
        ({"lb-a": {"keepalived_router_id": 52}}, "keepalived_router_id differs between the load balancers (51 on lb-b; "
                                                 "52 on lb-a)"),
        ({"lb-a": {"keepalived_priority": 190}}, "keepalived_priority: lb-a, lb-b share one priority"),
        ({"lb-a": {"keepalived_priority": 255}}, "keepalived_priority=255: must be 1-254"),
        ({"lb-a": {"keepalived_auth_pass": "longer-than-8"}}, "8 characters at most"),
        ({"lb-b": {"ansible_host": "lb-b.example.com"}}, "lb-b: no IPv4 address to speak VRRP from (none found)"),
    ],
)  # fmt: skip
def test_each_problem_is_named_with_its_fix(change, words):
    hostvars = {h: {**v, **change.get(h, {})} for h, v in PAIR.items()}
    found = problems(hostvars)
    assert any(words in p for p in found), found
    assert all("fix:" in p for p in found), found


def test_one_load_balancer_with_an_address_and_another_hosts_address_are_refused():
    alone = problems({"lb-a": PAIR["lb-a"]})
    assert any("lb_hosts has 1 member(s)" in p for p in alone), alone
    taken = problems(PAIR, inventory={"gpu-1": "10.0.0.100"})
    assert any("10.0.0.100 is gpu-1's own address" in p for p in taken), taken


def test_every_problem_at_once():
    hostvars = {"lb-a": {**PAIR["lb-a"], "load_balancer_vip": ["10.0.9.100/24", "bad"], "keepalived_priority": 190},
                "lb-b": PAIR["lb-b"]}  # fmt: skip
    found = problems(hostvars)
    assert len(found) >= 3, found


def test_haproxys_peers_are_the_same_addresses():
    facts = {"lb-a": {"ansible_host": "lb-a.example.com", "ansible_default_ipv4": {"address": "10.0.0.21"}},
             "lb-b": {"keepalived_address": "10.0.0.22"}}  # fmt: skip
    assert load_balancer_peers(["lb-b", "lb-a"], facts) == [
        {"name": "lb-a", "address": "10.0.0.21"}, {"name": "lb-b", "address": "10.0.0.22"}]  # fmt: skip
    assert keepalived_plan(["lb-a", "lb-b"], facts, "lb-a")["peers"] == ["10.0.0.22"]
