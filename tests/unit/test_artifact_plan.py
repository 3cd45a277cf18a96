"""The election that decides, per host, who makes a shared artifact and who takes it from the
registry (container_image, ft_convert, ft_gemm_tune)."""

from __future__ import annotations

import pytest
from fleet_artifacts import fleet_artifact_plan

HOSTS = ["a", "b", "c", "d"]


def hostvars(have: dict[str, bool], names: dict[str, str] | None = None) -> dict[str, dict]:
    """Every host needs artifact x unless `names` says otherwise; `have` says who has it."""
    names = names or {}
    return {host: {"ref": names.get(host, "x"), "local": have.get(host, False)} for host in HOSTS}


def plans(have: dict[str, bool], registry: bool, in_registry: bool, names: dict[str, str] | None = None):
    facts = hostvars(have, names)
    return {
        host: fleet_artifact_plan(HOSTS, facts, host, "ref", "local", registry=registry, in_registry=in_registry,
                                  make="convert")["plan"]
        for host in HOSTS
    }  # fmt: skip


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
    ],
)
def test_one_host_makes_or_pushes_and_the_others_wait_or_pull(have, registry, in_registry, expected):
    assert plans(have, registry, in_registry) == expected


def test_hosts_that_need_different_artifacts_elect_separately():
    # a and c need x, b and d need y: each artifact has its own maker.
    assert plans({}, True, False, names={"b": "y", "d": "y"}) == {"a": "convert", "b": "convert", "c": "wait",
                                                                   "d": "wait"}  # fmt: skip


def test_the_source_is_the_first_holder_else_the_first_that_lacks_it():
    facts = hostvars({"c": True})
    assert fleet_artifact_plan(HOSTS, facts, "a", "ref", "local", registry=True) == {"plan": "wait", "source": "c"}
    facts = hostvars({})
    assert fleet_artifact_plan(HOSTS, facts, "d", "ref", "local", registry=True) == {"plan": "wait", "source": "a"}


def test_string_booleans_and_a_host_missing_from_the_play_hosts():
    facts = {"a": {"ref": "x", "local": "False"}, "b": {"ref": "x", "local": "True"}, "z": {"ref": "x"}}
    assert fleet_artifact_plan(["a", "b"], facts, "a", "ref", "local", registry="true")["plan"] == "wait"
    assert fleet_artifact_plan(["a", "b"], facts, "b", "ref", "local", registry=True)["plan"] == "push"
    # z failed earlier and left ansible_play_hosts; asked anyway, it decides as the last peer.
    assert fleet_artifact_plan(["a", "b"], facts, "z", "ref", "local", registry=True, in_registry=True) == {
        "plan": "pull", "source": "b"}  # fmt: skip
    # in_registry without a registry means nothing
    assert fleet_artifact_plan(["a"], {"a": {"ref": "x"}}, "a", "ref", "local", in_registry=True)["plan"] == "make"
