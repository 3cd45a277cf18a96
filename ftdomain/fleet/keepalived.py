"""Two or more load balancers sharing virtual addresses through VRRP (keepalived): the plan each
one runs, and what preflight refuses, from the inventory in one place."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from ftdomain.errors import AnsibleFilterError

DEFAULT_ROUTER_ID = 51
TOP_PRIORITY = 200
PRIORITY_STEP = 10


def vip_list(vip: Any) -> list[str]:
    """load_balancer_vip as a list: one address, a list of them, or none."""
    if vip in (None, ""):
        return []
    return [vip] if isinstance(vip, str) else list(vip) if isinstance(vip, list | tuple) else [vip]


def _parse(vip: Any) -> ipaddress.IPv4Interface:
    if not isinstance(vip, str) or "/" not in vip:
        raise ValueError(f"load_balancer_vip={vip!r}: an IPv4 address with its prefix, e.g. 10.0.0.100/24")
    try:
        parsed = ipaddress.ip_interface(vip)
    except ValueError as err:
        raise ValueError(f"load_balancer_vip={vip!r}: {err}") from None
    if not isinstance(parsed, ipaddress.IPv4Interface):
        raise ValueError(f"load_balancer_vip={vip!r}: IPv4 only (VRRP v2)")
    return parsed


def _int(value: Any, default: int) -> int:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ValueError(value)
    return int(value)


def keepalived_instances(vip: Any, router_id: Any = DEFAULT_ROUTER_ID) -> list[dict[str, Any]]:
    try:
        first = _int(router_id, DEFAULT_ROUTER_ID)
        parsed = [_parse(v) for v in vip_list(vip)]
    except ValueError as err:
        raise AnsibleFilterError(f"keepalived_instances: {err}") from None
    return [
        {"name": f"ftfleet_vip_{i}", "address": str(p.ip), "prefix": p.network.prefixlen, "router_id": first + i}
        for i, p in enumerate(parsed)
    ]


def _own_address(v: Mapping[str, Any]) -> str:
    """keepalived_address, else an IPv4 ansible_host, else the facts' default IPv4 address
    (ansible_default_ipv4 in hostvars)."""
    if v.get("keepalived_address"):
        return str(v["keepalived_address"])
    named = str(v.get("ansible_host") or "")
    try:
        ipaddress.IPv4Address(named)
        return named
    except ValueError:
        pass
    facts = v.get("ansible_default_ipv4")
    return str(facts.get("address") or "") if isinstance(facts, Mapping) else ""


def _priority(hosts: list[str], host: str, v: Mapping[str, Any]) -> Any:
    value = v.get("keepalived_priority")
    return TOP_PRIORITY - PRIORITY_STEP * sorted(hosts).index(host) if value in (None, "") else value


def keepalived_plan(hosts: Any, hostvars: Any, host: str) -> dict[str, Any]:
    if not isinstance(hosts, list | tuple) or host not in hosts:
        raise AnsibleFilterError(f"keepalived_plan: {host!r} is not among the load balancers {hosts!r}")
    v = hostvars[host]
    return {
        "address": _own_address(v),
        "priority": int(_priority(list(hosts), host, v)),
        "peers": [_own_address(hostvars[h]) for h in sorted(hosts) if h != host],
        "instances": keepalived_instances(v.get("load_balancer_vip"), v.get("keepalived_router_id")),
    }


def _router_problems(hosts: list[str], hostvars: Any, v: Mapping[str, Any], count: int) -> list[str]:
    problems = []
    try:
        first = _int(v.get("keepalived_router_id"), DEFAULT_ROUTER_ID)
        if not 1 <= first <= 256 - count:
            problems.append(
                f"keepalived_router_id={first}: with {count} address(es) the ids run {first}-{first + count - 1}, "
                "past VRRP's 1-255; fix: a number from 1 to " + str(256 - count)
            )
    except (TypeError, ValueError):
        value = v.get("keepalived_router_id")
        problems.append(f"keepalived_router_id={value!r}: must be a whole number 1-255; fix: e.g. 51")
    starts: dict[int, list[str]] = {}
    for h in hosts:
        try:
            starts.setdefault(_int(hostvars[h].get("keepalived_router_id"), DEFAULT_ROUTER_ID), []).append(h)
        except (TypeError, ValueError):
            continue
    if len(starts) > 1:
        said = "; ".join(f"{r} on {', '.join(hs)}" for r, hs in sorted(starts.items()))
        problems.append(
            f"keepalived_router_id differs between the load balancers ({said}): the members of one "
            "virtual router share its id; fix: set it once for lb_hosts"
        )
    return problems


def _priority_problems(hosts: list[str], hostvars: Any, host: str) -> list[str]:
    problems, priorities = [], {}
    for h in hosts:
        try:
            priority = int(_priority(hosts, h, hostvars[h]))
        except (TypeError, ValueError):
            if h == host:
                value = hostvars[h].get("keepalived_priority")
                problems.append(f"keepalived_priority={value!r}: must be a whole number 1-254; fix: e.g. 150")
            continue
        if h == host and not 1 <= priority <= 254:
            problems.append(f"keepalived_priority={priority}: must be 1-254 (255 is an address owner's); fix: e.g. 150")
        priorities.setdefault(priority, []).append(h)
    same = [hs for hs in priorities.values() if len(hs) > 1 and host in hs]
    if same:
        problems.append(
            f"keepalived_priority: {', '.join(same[0])} share one priority, so the election between them falls "
            "to their addresses; fix: distinct priorities (or leave keepalived_priority unset: 200, 190, ... in "
            "name order)"
        )
    return problems


def _address_problems(own: dict[str, str], parsed: list[Any], inventory: Any) -> list[str]:
    problems = []
    for h, address in own.items():
        try:
            ip = ipaddress.IPv4Address(address)
        except ValueError:
            problems.append(
                f"{h}: no IPv4 address to speak VRRP from ({address or 'none found'}); fix: keepalived_address "
                "on that host, or ansible_host as an IP"
            )
            continue
        problems += [
            f"load_balancer_vip={p}: {h}'s address {ip} is not in {p.network}, so the address could not move "
            "there; fix: a virtual address in the load balancers' network"
            for p in parsed
            if ip not in p.network
        ]
    taken = {str(a): h for h, a in dict(inventory or {}).items() if a}
    taken.update({a: h for h, a in own.items() if a})
    problems += [
        f"load_balancer_vip={p}: {p.ip} is {taken[str(p.ip)]}'s own address; fix: an unused address of that network"
        for p in parsed
        if str(p.ip) in taken
    ]
    return problems


def load_balancer_peers(hosts: Any, hostvars: Any) -> list[dict[str, str]]:
    """HAProxy's peers (each load balancer's name and address, as keepalived_plan finds it), so
    that the stick tables of the per-key limits follow the virtual address."""
    return [{"name": h, "address": _own_address(hostvars[h])} for h in sorted(hosts or [])]


def keepalived_problems(hosts: Any, hostvars: Any, host: str, inventory: Any = None) -> list[str]:
    """Every problem of this load balancer's VRRP settings (the group's included), as sentences.
    inventory: every other host -> its address (ansible_host)."""
    hosts = sorted(hosts or [])
    v = hostvars[host]
    vips = vip_list(v.get("load_balancer_vip"))
    if not vips:
        return []
    problems, parsed = [], []
    for vip in vips:
        try:
            parsed.append(_parse(vip))
        except ValueError as err:
            problems.append(f"{err}; fix: the address clients use, with its network's prefix")
    if len(hosts) < 2:
        problems.append(
            f"load_balancer_vip is set but lb_hosts has {len(hosts)} member(s): a virtual address moves between "
            "two or more; fix: add a second load balancer, or leave load_balancer_vip empty"
        )
    problems += _router_problems(hosts, hostvars, v, len(vips))
    problems += _priority_problems(hosts, hostvars, host)
    if len(str(v.get("keepalived_auth_pass") or "")) > 8:
        problems.append(
            "keepalived_auth_pass: VRRP's simple password is 8 characters at most (keepalived cuts the rest); "
            "fix: 8 or fewer, from the vault"
        )
    own = {h: _own_address(hostvars[h]) for h in hosts}
    problems += _address_problems(own, parsed, inventory)
    return list(dict.fromkeys(problems))
