"""A server's runtime state from HAProxy's `show servers state` (load_balancer_server_state): what
role lb_ready compares before putting a host back, instead of the stats row whose live session
count moves under load (a re-run with clients running reported "changed" for a host already back)."""

from __future__ import annotations

import pytest

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.load_balancer import load_balancer_server_state

HEADER = [
    "1",
    "# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight "
    "srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state "
    "srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port "
    "srv_check_addr srv_agent_addr srv_agent_port",
]


def row(server: str, op: int, admin: int, weight: int, *, configured: int = 100, backend: str = "model_tiny") -> str:
    """A line as HAProxy 2.6 writes it (the fields past srv_iweight do not matter here)."""
    return f"3 {backend} 1 {server} 172.30.0.11 {op} {admin} {weight} {configured} 42 6 3 4 6 0 0 0 - 8090 - 0 0 - - 0"


@pytest.mark.parametrize(
    ("line", "percent", "ready"),
    [
        (row("lab-node1", 2, 0, 100), 100, True),  # up, ready, whole weight: nothing to do
        (row("lab-node1", 2, 0, 50), 100, False),  # a canary's share left over: the weight changes
        (row("lab-node1", 2, 0, 50), 50, True),  # the canary's share asked again
        (row("lab-node1", 0, 1, 100), 100, False),  # forced maintenance (lb_member drained it)
        (row("lab-node1", 2, 8, 100), 100, False),  # draining
        (row("lab-node1", 2, 0, 33, configured=67), 50, True),  # 67 * 50 / 100, as HAProxy rounds it
    ],
)  # fmt: skip
def test_ready_means_admin_ready_at_the_asked_share_of_the_configured_weight(line, percent, ready):
    lines = [*HEADER, row("lab-node2", 2, 0, 100), line]
    state = load_balancer_server_state(lines, "model_tiny", "lab-node1", percent)
    assert state["ready"] is ready
    assert state["configured_weight"] == int(line.split()[8])


def test_a_server_missing_or_named_twice_is_an_error():
    with pytest.raises(AnsibleFilterError, match="0 servers named 'lab-node3' in backend 'model_tiny'"):
        load_balancer_server_state([*HEADER, row("lab-node1", 2, 0, 100)], "model_tiny", "lab-node3")
    with pytest.raises(AnsibleFilterError, match="2 servers named 'lab-node1'"):
        load_balancer_server_state([*HEADER, row("lab-node1", 2, 0, 100)] * 2, "model_tiny", "lab-node1")
    other = load_balancer_server_state(
        [*HEADER, row("lab-node1", 2, 0, 100, backend="model_b")], "model_b", "lab-node1"
    )
    assert other["ready"] is True
