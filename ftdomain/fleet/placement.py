"""Several models on one machine: each model is an inventory host of its own (a slot) that names
the machine it runs on (fleet_machine, the machine's own inventory host). These filters say which
host does a machine's shared work, and check the whole placement of each machine at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.monitoring import _model_name
from ftdomain.inputs.derived import role_defaults
from ftdomain.values import truthy

# The ports a model's host binds on its machine, and the machine's own (the exporters).
MODEL_PORTS = ("triton_server_http_port", "triton_server_grpc_port", "triton_server_metrics_port")
MACHINE_PORTS = ("node_exporter_port", "dcgm_exporter_port")


def _machine(host: str, v: Mapping[str, Any]) -> str:
    return str(v.get("fleet_machine") or host)


def _address(host: str, v: Mapping[str, Any]) -> str:
    return str(v.get("ansible_host") or host)


def _ports(v: Mapping[str, Any], defaults: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, str]:
    ports = {name: v.get(name, defaults.get(name)) for name in names}
    return {name: str(port).strip() for name, port in ports.items() if port not in (None, "")}


def fleet_placement_problems(hosts: Any, hostvars: Any) -> dict[str, list[str]]:
    if not isinstance(hosts, list | tuple):
        raise AnsibleFilterError(f"fleet_placement_problems: expected a list of hosts, got {type(hosts).__name__}")
    hosts = list(dict.fromkeys(str(h) for h in hosts))
    known = set(hosts)
    machines: dict[str, list[str]] = {}  # machine -> its slots, in inventory order
    for host in hosts:
        machine = _machine(host, hostvars[host])  # one variable of every host
        if machine != host:
            machines.setdefault(machine, []).append(host)
    problems: dict[str, list[str]] = {}

    def say(host: str, text: str) -> None:
        problems.setdefault(host, []).append(text)

    defaults = role_defaults() if machines else {}
    for machine, slots in machines.items():
        if machine not in known:
            for slot in slots:
                say(slot, f"fleet_machine={machine}: no GPU host of that name; fix: name the inventory host of the "
                          f"machine this model runs on (it serves the machine's first model)")  # fmt: skip
            continue
        mv = hostvars[machine]
        if _machine(machine, mv) != machine:
            for slot in slots:
                say(slot, f"fleet_machine={machine}: {machine} is itself another model on {_machine(machine, mv)}; "
                          f"fix: fleet_machine: {_machine(machine, mv)}")  # fmt: skip
            continue
        if not _model_name(mv):
            for slot in slots:
                say(slot, f"fleet_machine={machine}: {machine} serves no model (fleet_model is empty), and the "
                          f"machine's own host does its shared work; fix: give {machine} the machine's first "
                          f"model")  # fmt: skip
            continue
        _check_machine(machine, mv, slots, hostvars, defaults, say)
    return problems


def _check_machine(machine: str, mv: Mapping[str, Any], slots: list[str], hostvars: Any, defaults: Mapping[str, Any],
                   say) -> None:  # fmt: skip
    members = {machine: mv} | {slot: hostvars[slot] for slot in slots}  # each once
    names: dict[str, str] = {}
    gpus: dict[int, str] = {}
    ports: dict[str, tuple[str, str]] = {
        port: (machine, name) for name, port in _ports(mv, defaults, MACHINE_PORTS).items()
    }
    for host, v in members.items():
        model = _model_name(v)
        if host != machine:
            _slot_problems(host, v, machine, mv, say)
        if not model:
            continue
        if model in names:
            for one, other in ((host, names[model]), (names[model], host)):
                say(one, f"fleet_model.name={model}: {other} serves it on machine {machine} too, and the name names "
                         f"its unit, container and directories; fix: one model of a name per machine")  # fmt: skip
        names.setdefault(model, host)
        devices = v.get("fleet_gpu_devices", defaults.get("fleet_gpu_devices", [0]))
        for gpu in devices if isinstance(devices, list | tuple) else []:
            if not isinstance(gpu, int) or isinstance(gpu, bool):
                continue  # the input check says what is wrong with the list
            if gpu in gpus:  # said on both hosts: a run limited to either stops
                other = gpus[gpu]
                for one, two, theirs in ((host, other, _model_name(members[other])), (other, host, model)):
                    say(one, f"fleet_gpu_devices: GPU {gpu} of machine {machine} serves {theirs} too (host {two}); "
                             f"fix: give each model on a machine GPUs of its own")  # fmt: skip
            gpus.setdefault(gpu, host)
        _port_clashes(host, v, machine, defaults, ports, say)


def _slot_problems(host: str, v: Mapping[str, Any], machine: str, mv: Mapping[str, Any], say) -> None:
    """Another model's host: at its machine's address, with the machine's gateway setting, serving a model."""
    if _address(host, v) != _address(machine, mv):
        say(host, f"ansible_host={_address(host, v)}: another model on machine {machine} (fleet_machine) "
                  f"must reach it at its address; fix: ansible_host: {_address(machine, mv)}")  # fmt: skip
    if truthy(v.get("fleet_gateway"), True) != truthy(mv.get("fleet_gateway"), True):
        say(host, f"fleet_gateway={truthy(v.get('fleet_gateway'), True)}: {machine} has "
                  f"{truthy(mv.get('fleet_gateway'), True)}, and the machine's host installs the gateway for every "
                  f"model on it; fix: the same fleet_gateway for every model on a machine")  # fmt: skip
    if not _model_name(v):
        say(host, f"fleet_model is empty: another model's host on {machine} (fleet_machine) serves no model; "
                  f"fix: give it a fleet_model, or remove it")  # fmt: skip


def _port_clashes(host: str, v: Mapping[str, Any], machine: str, defaults: Mapping[str, Any],
                  ports: dict[str, tuple[str, str]], say) -> None:  # fmt: skip
    """The host's ports against those taken on its machine (each clash said on both hosts: a run
    limited to either stops); records its own."""
    own = _ports(v, defaults, MODEL_PORTS)
    if truthy(v.get("fleet_gateway"), True):
        own.update(_ports(v, defaults, ("gateway_port",)))
    for name, port in own.items():
        if port not in ports:
            ports[port] = (host, name)
            continue
        other, what = ports[port]
        for one, mine, two, theirs in ((host, name, other, what), (other, what, host, name)):
            say(one, f"{mine}={port}: host {two} on machine {machine} has it too ({theirs}); fix: give each "
                     f"model on a machine ports of its own (tritonserver's three, the gateway's, and not the "
                     f"machine's exporters')")  # fmt: skip


def fleet_machine_leader(host: Any, hostvars: Any, play_hosts: Any) -> bool:
    v = hostvars[str(host)]
    machine = _machine(str(host), v)
    if machine == host:
        return True
    hosts = [str(h) for h in play_hosts or []]
    if machine in hosts:
        return False
    # The machine's host is not in this run (--limit): its first slot in play order does the work.
    return next(h for h in hosts if h == host or _machine(h, hostvars[h]) == machine) == host
