"""Several models on one machine (fleet_machine): preflight's placement check of every machine at
once (GPUs, ports, names, the machine itself), on both hosts of a clash; which host does a
machine's shared work; and the check's cost in lookups (linear in the hosts)."""

from __future__ import annotations

import pytest
from test_artifact_plan import Counted

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.placement import fleet_machine_leader, fleet_placement_problems

MACHINE = {"fleet_model": {"name": "llama-7b"}, "fleet_gpu_devices": [0, 1], "ansible_host": "10.0.0.4"}
SLOT = {"fleet_machine": "gpu-4", "fleet_model": {"name": "neox"}, "fleet_gpu_devices": [2, 3],
        "ansible_host": "10.0.0.4", "triton_server_http_port": 8200, "triton_server_grpc_port": 8201,
        "triton_server_metrics_port": 8202, "gateway_port": 8081}  # fmt: skip


def check(**changes: dict) -> dict[str, list[str]]:
    hostvars = {"gpu-4": dict(MACHINE), "neox.gpu-4": dict(SLOT), "gpu-9": {"fleet_model": {"name": "kogpt"}}}
    for host, values in changes.items():
        hostvars[{"gpu_4": "gpu-4", "neox_gpu_4": "neox.gpu-4"}[host]].update(values)
    return fleet_placement_problems(list(hostvars), hostvars)


def test_a_good_placement_and_a_fleet_without_slots_have_no_problem():
    assert check() == {}
    assert fleet_placement_problems(["a", "b"], {"a": MACHINE, "b": MACHINE}) == {}  # separate machines


def test_a_gpu_used_twice_is_said_on_both_hosts():
    problems = check(neox_gpu_4={"fleet_gpu_devices": [1, 2]})
    assert set(problems) == {"gpu-4", "neox.gpu-4"}
    assert problems["neox.gpu-4"] == ["fleet_gpu_devices: GPU 1 of machine gpu-4 serves llama-7b too (host gpu-4); "
                                      "fix: give each model on a machine GPUs of its own"]  # fmt: skip
    assert "GPU 1 of machine gpu-4 serves neox too (host neox.gpu-4)" in problems["gpu-4"][0]


@pytest.mark.parametrize(
    ("slot", "clash"),
    [
        ({"triton_server_http_port": 8000}, "triton_server_http_port=8000: host gpu-4 on machine gpu-4 has it too"),
        ({"gateway_port": 8080}, "gateway_port=8080: host gpu-4 on machine gpu-4 has it too (gateway_port)"),
        ({"triton_server_metrics_port": 9100}, "(node_exporter_port)"),  # the machine's exporter, a default
        ({"gateway_port": 8200}, "gateway_port=8200: host neox.gpu-4 on machine gpu-4 has it too"),  # its own
    ],
)
def test_a_port_used_twice_on_a_machine_is_refused(slot, clash):
    problems = check(neox_gpu_4=slot)
    assert any(clash in p for p in problems["neox.gpu-4"]), problems


def test_a_gateway_port_is_not_bound_without_the_gateway():
    assert check(gpu_4={"fleet_gateway": False}, neox_gpu_4={"fleet_gateway": False, "gateway_port": 8080}) == {}


def test_one_model_name_twice_on_a_machine_is_refused():
    problems = check(neox_gpu_4={"fleet_model": {"name": "llama-7b"}})
    assert "fleet_model.name=llama-7b: neox.gpu-4 serves it on machine gpu-4 too" in problems["gpu-4"][0]
    assert "fleet_model.name=llama-7b: gpu-4 serves it" in problems["neox.gpu-4"][0]


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"neox_gpu_4": {"fleet_machine": "gpu-5"}}, "fleet_machine=gpu-5: no GPU host of that name"),
        ({"neox_gpu_4": {"ansible_host": "10.0.0.5"}}, "ansible_host=10.0.0.5: another model on machine gpu-4"),
        ({"neox_gpu_4": {"fleet_gateway": False}}, "fleet_gateway=False: gpu-4 has True"),
        ({"gpu_4": {"fleet_model": {}}}, "fleet_machine=gpu-4: gpu-4 serves no model"),
        ({"gpu_4": {"fleet_machine": "gpu-9"}}, "fleet_machine=gpu-4: gpu-4 is itself another model on gpu-9"),
        ({"neox_gpu_4": {"fleet_model": {}}}, "fleet_model is empty: another model's host on gpu-4"),
    ],
)
def test_a_slot_needs_a_machine_that_serves_at_its_address(changes, said):
    problems = check(**changes)
    assert any(said in p for p in problems.get("neox.gpu-4", [])), problems


def test_bad_inputs_are_left_to_the_input_check():
    assert check(neox_gpu_4={"fleet_gpu_devices": "2,3"}) == {}  # fleet_input_problems says it
    assert check(neox_gpu_4={"fleet_gpu_devices": [True, 0]}) != {}  # 0 still clashes; True is skipped
    with pytest.raises(AnsibleFilterError, match="expected a list of hosts"):
        fleet_placement_problems("gpu-4", {})


@pytest.mark.parametrize("count", [100, 1000])
def test_the_check_reads_each_host_once_and_only_machines_with_slots_again(count):
    hosts = [f"gpu-{i:04d}" for i in range(count)]
    facts = {h: {"fleet_model": {"name": "m"}, "fleet_gpu_devices": [0]} for h in hosts}
    facts |= {f"x.{h}": {"fleet_machine": h, "ansible_host": h, "fleet_model": {"name": "x"}, "fleet_gpu_devices": [1],
                         "triton_server_http_port": 8100, "triton_server_grpc_port": 8101,
                         "triton_server_metrics_port": 8102, "gateway_port": 8081} for h in hosts[:10]}  # fmt: skip
    counted = Counted(facts)
    assert fleet_placement_problems(list(facts), counted) == {}
    # one lookup of each host, then one of each machine with slots and of each slot
    assert counted.lookups == len(facts) + 10 + 10


def test_the_machine_does_its_shared_work_unless_a_run_leaves_it_out():
    facts = {"gpu-4": MACHINE, "neox.gpu-4": SLOT, "b.gpu-4": {**SLOT, "fleet_model": {"name": "b"}}}
    assert fleet_machine_leader("gpu-4", facts, ["gpu-4", "neox.gpu-4"])
    assert not fleet_machine_leader("neox.gpu-4", facts, ["gpu-4", "neox.gpu-4"])
    # --limit without the machine: its first slot in play order does it, and only that one
    assert fleet_machine_leader("neox.gpu-4", facts, ["neox.gpu-4", "b.gpu-4"])
    assert not fleet_machine_leader("b.gpu-4", facts, ["neox.gpu-4", "b.gpu-4"])
