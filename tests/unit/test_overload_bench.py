"""benchmarks/overload.py's own parts: the probe that times refusals (against a local HTTP server
that refuses as the front does) and the table of a result, with the tenants' unloaded level."""

from __future__ import annotations

import argparse
import http.server
import json
import threading
from typing import ClassVar

import pytest

from benchmarks import overload


class Front(http.server.BaseHTTPRequestHandler):
    """Every third completion answered with a stream's first event, the others refused as the
    front's admission refuses (503, overloaded, Retry-After)."""

    seen: ClassVar[list[dict]] = []
    lock = threading.Lock()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            self.seen.append({"body": body, "auth": self.headers["Authorization"]})
            accepted = len(self.seen) % 3 == 0
        if accepted:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'data: {"choices": [{"text": "x"}]}\n\n')
            return
        refusal = json.dumps({"error": {"code": "overloaded", "type": "server_error", "message": "busy"}}).encode()
        self.send_response(503)
        self.send_header("Retry-After", "1")
        self.send_header("Content-Length", str(len(refusal)))
        self.end_headers()
        self.wfile.write(refusal)

    def log_message(self, *_args):
        pass


@pytest.fixture
def front():
    Front.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Front)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_probe_sends_its_rate_and_times_each_refusal(front):
    args = argparse.Namespace(url=front, model="tiny-gpt2", tokens=64)
    result = overload.probe(args, "flood-key", rate=20, seconds=1.0)
    print(json.dumps(result))
    assert len(Front.seen) == 20  # rate x seconds, sent at even intervals
    assert result["answers"] == {"200": 6, "503": 14}  # every third accepted
    assert result["rate_rps"] == 20
    assert all(result["refusal_ms"][q] is not None for q in ("p50", "p95", "p99"))
    assert result["refusal_ms"]["p50"] <= result["refusal_ms"]["p95"] <= result["refusal_ms"]["p99"]
    assert {s["auth"] for s in Front.seen} == {"Bearer flood-key"}
    assert {(s["body"]["model"], s["body"]["stream"], s["body"]["max_tokens"]) for s in Front.seen} == {
        ("tiny-gpt2", True, 64)
    }


def test_an_unreachable_front_is_counted_by_its_error_not_as_a_refusal():
    args = argparse.Namespace(url="http://127.0.0.1:9", model="m", tokens=1)  # discard port: nothing listens
    result = overload.probe(args, "k", rate=4, seconds=0.5)
    assert result["answers"] == {"ConnectionRefusedError": 2}
    assert result["refusal_ms"] == {"p50": None, "p95": None, "p99": None}


def _key(p95: float, sent: int = 10, rate: float = 0.5) -> dict:
    ttft = {"p50": p95 / 2, "p95": p95, "p99": p95}
    return {"rate_rps": rate, "sent": sent, "outcomes": {"200": sent}, "goodput_rps": 0.3, "ttft_ms": ttft,
            "itl_ms": {"p50": 5, "p95": 7, "p99": 8}}  # fmt: skip


def test_the_table_gives_each_tenants_p95_under_load_as_a_multiple_of_its_unloaded_one():
    probe = {"rate_rps": 4, "answers": {"200": 30, "503": 90}, "refusal_ms": {"p50": 2.5, "p95": 9.4, "p99": 31}}
    result = {
        "slo": {"ttft_ms": 1000, "itl_ms": 100},
        "capacity_rps": 4,
        "loads": [
            {"load": 0, "keys": {"tenant-a": _key(40), "tenant-b": _key(50)}},
            {"load": 5, "keys": {"tenant-a": _key(60), "tenant-b": _key(400), "flood": _key(700, 400, 14),
                                 "probe": probe}},
        ],
    }  # fmt: skip
    rows = {tuple(cell.strip() for cell in line.split("|")[1:3]): line for line in overload.table(result).splitlines()
            if line.startswith("| 0x") or line.startswith("| 5x")}  # fmt: skip
    assert set(rows) == {
        ("0x", "tenant-a"),
        ("0x", "tenant-b"),
        ("5x", "tenant-a"),
        ("5x", "tenant-b"),
        ("5x", "flood"),
    }
    assert "| 1.5x |" in rows["5x", "tenant-a"]  # 60 / 40
    assert "| 8.0x |" in rows["5x", "tenant-b"]  # 400 / 50
    assert "x |" not in rows["0x", "tenant-a"].split("|")[9]  # no ratio at the unloaded level itself
    assert "| 4, 200: 30, 503: 90 | 2 / 9 / 31 |" in rows["5x", "flood"]


def test_the_probe_sends_in_bursts_at_the_same_rate(front):
    args = argparse.Namespace(url=front, model="tiny-gpt2", tokens=8)
    result = overload.probe(args, "flood-key", rate=20, seconds=1.0, burst=4)
    assert len(Front.seen) == 20  # five bursts of four
    assert sum(result["answers"].values()) == 20
    assert result["answers"]["503"] == 14
