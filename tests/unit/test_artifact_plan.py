"""The election that decides, for the play's hosts, who makes a shared artifact and who takes it
from the registry (container_image, ft_convert, ft_gemm_tune), and what it costs in lookups."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from ftdomain.fleet.artifacts import fleet_artifact_plans

HOSTS = ["a", "b", "c", "d"]


def hostvars(have: dict[str, bool], names: dict[str, str] | None = None, in_registry: bool = False) -> dict:
    """Every host needs artifact x unless `names` says otherwise; `have` says who has it."""
    names = names or {}
    return {host: {"ref": names.get(host, "x"), "local": have.get(host, False), "found": in_registry}
            for host in HOSTS}  # fmt: skip


def plans(have: dict[str, bool], registry: bool, in_registry: bool, names: dict[str, str] | None = None):
    facts = hostvars(have, names, in_registry)
    elected = fleet_artifact_plans(HOSTS, facts, "ref", "local", "found", registry=registry, make="convert")
    return {host: elected[host]["plan"] for host in HOSTS}


@pytest.mark.parametrize(
    ("have", "registry", "in_registry", "expected"),
    [
        # Without a registry every host that lacks it makes it.
        ({}, False, False, {"a": "convert", "b": "convert", "c": "convert", "d": "convert"}),
        ({"b": True}, False, False, {"a": "convert", "b": "have", "c": "convert", "d": "convert"}),
        # Nobody has it, the registry lacks it: the first makes it, the others wait, then pull.
        ({}, True, False, {"a": "convert", "b": "wait", "c": "wait", "d": "wait"}),
        # The registry has it: every host that lacks it pulls.
        ({}, True, True, {"a": "pull", "b": "pull", "c": "pull", "d": "pull"}),
        ({"c": True}, True, True, {"a": "pull", "b": "pull", "c": "have", "d": "pull"}),
        # A host has it and the registry lacks it: the first holder pushes, nobody makes it.
        ({"c": True, "d": True}, True, False, {"a": "wait", "b": "wait", "c": "push", "d": "have"}),
        # A registry's answer without a registry means nothing.
        ({}, False, True, {"a": "convert", "b": "convert", "c": "convert", "d": "convert"}),
    ],
)
def test_one_host_makes_or_pushes_and_the_others_wait_or_pull(have, registry, in_registry, expected):
    assert plans(have, registry, in_registry) == expected


def test_hosts_that_need_different_artifacts_elect_separately():
    # a and c need x, b and d need y: each artifact has its own maker.
    assert plans({}, True, False, names={"b": "y", "d": "y"}) == {"a": "convert", "b": "convert", "c": "wait",
                                                                   "d": "wait"}  # fmt: skip


def test_the_source_is_the_first_holder_else_the_first_that_lacks_it():
    elected = fleet_artifact_plans(HOSTS, hostvars({"c": True}), "ref", "local", "found", registry=True)
    assert elected["a"] == {"plan": "wait", "source": "c"}
    elected = fleet_artifact_plans(HOSTS, hostvars({}), "ref", "local", "found", registry=True)
    assert elected["d"] == {"plan": "wait", "source": "a"}


def test_string_booleans_and_hosts_without_the_artifact():
    facts = {"a": {"ref": "x", "local": "False"}, "b": {"ref": "x", "local": "True"}, "z": {"local": True}}
    elected = fleet_artifact_plans(["a", "b", "z"], facts, "ref", "local", registry="true")
    assert elected == {"a": {"plan": "wait", "source": "b"}, "b": {"plan": "push", "source": "b"}}  # z takes no part


class Counted(Mapping):
    """hostvars that count how often a host's variables are looked up (in Ansible each lookup
    templates that host's variables: the cost that grew with the square of the hosts)."""

    def __init__(self, facts: dict) -> None:
        self.facts, self.lookups = facts, 0

    def __getitem__(self, host: str) -> dict:
        self.lookups += 1
        return self.facts[host]

    def __iter__(self):
        return iter(self.facts)

    def __len__(self) -> int:
        return len(self.facts)


@pytest.mark.parametrize("count", [10, 100, 1000])
def test_one_election_reads_each_hosts_variables_once(count):
    """The play's election for N hosts costs N lookups (the per-host election it replaced cost
    N x N: each host read every host's variables)."""
    hosts = [f"gpu-{i:04d}" for i in range(count)]
    facts = Counted({h: {"ref": f"m{i % 7}", "local": i % 5 == 0, "found": False} for i, h in enumerate(hosts)})
    elected = fleet_artifact_plans(hosts, facts, "ref", "local", "found", registry=True, make="tune")
    assert facts.lookups == count
    assert len(elected) == count
    # per artifact, the first host that has it pushes, else the first host makes it
    held = {f"m{i % 7}" for i in range(count) if i % 5 == 0}
    made = [p["plan"] for p in elected.values()]
    assert (made.count("push"), made.count("tune")) == (len(held), min(count, 7) - len(held))


@pytest.mark.parametrize(("registry", "first"), [(False, "convert"), (True, "convert")])
def test_models_on_one_machine_leave_an_artifact_to_the_first_of_them_there(registry, first):
    """Several models on one machine (fleet_machine) that need the same artifact: the first of
    them there takes part in the election, the others leave it to that host (one image load or
    build per machine, never two at once in one engine)."""
    facts = {"a": {"ref": "x", "local": False, "m": "a"}, "b": {"ref": "x", "local": False, "m": "a"},
             "c": {"ref": "x", "local": False, "m": "c"}, "d": {"ref": "y", "local": False, "m": "a"}}  # fmt: skip
    elected = fleet_artifact_plans(["a", "b", "c", "d"], facts, "ref", "local", "found", registry=registry,
                                   make="convert", place="m")  # fmt: skip
    assert elected["a"] == {"plan": first, "source": "a"}
    assert elected["b"] == {"plan": "mate", "source": "a"}  # a's machine, a's artifact
    assert elected["c"]["plan"] == ("wait" if registry else "convert")  # another machine
    assert elected["d"]["plan"] == "convert"  # another artifact on a's machine: its own
    # Without place, the same hosts elect as separate machines.
    alone = fleet_artifact_plans(["a", "b"], facts, "ref", "local", "found", registry=True, make="convert")
    assert alone["b"] == {"plan": "wait", "source": "a"}
