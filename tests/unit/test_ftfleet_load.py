"""scripts/ftfleet-load's counting of busy refusals, against a loopback server that refuses
like the fleet's admission (503, OpenAI error code overloaded, Retry-After)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

LOAD = Path(__file__).resolve().parents[2] / "scripts" / "ftfleet-load"


class Refusing(http.server.BaseHTTPRequestHandler):
    """Refuses the first `busy` completions as overloaded, then answers each with a text."""

    busy = 0
    seen = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.lock:
            type(self).seen += 1
            refuse = type(self).seen <= self.busy
        if refuse:
            body = json.dumps({"error": {"code": "overloaded", "type": "server_error", "message": "busy"}})
            self.send_response(503)
            self.send_header("Retry-After", "0.05")
        else:
            body = json.dumps({"choices": [{"text": " answered"}], "system_fingerprint": "rev"})
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *_args) -> None:
        pass


@pytest.fixture
def server():
    def start(busy: int) -> str:
        handler = type("Handler", (Refusing,), {"busy": busy, "seen": 0})
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    started: list = []
    yield start
    for httpd in started:
        httpd.shutdown()


def load(url: str, *extra: str) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, str(LOAD), "--url", url, "--key", "k", "--model", "m", "--interval", "0", *extra],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def test_refused_then_answered_is_one_request_answered(server) -> None:
    rc, out = load(server(busy=3), "--clients", "1", "--max-requests", "2", "--seconds", "30")
    assert (rc, out["requests"], out["failed"], out["statuses"]) == (0, 2, 0, {"200": 2}), out
    assert out["refused"] == {"overloaded": 3}, out
    assert out["abandoned"] == {}, out


def test_refused_past_its_retries_is_failed(server) -> None:
    rc, out = load(server(busy=1000), "--clients", "1", "--max-requests", "2", "--seconds", "30",
                   "--busy-retries", "2")  # fmt: skip
    assert (rc, out["requests"], out["failed"], out["statuses"]) == (1, 2, 2, {"503": 2}), out
    assert out["refused"] == {"overloaded": 4}, out  # two asked again twice each, then given up


def test_still_refused_when_the_load_stops_is_abandoned_not_failed(server, tmp_path) -> None:
    stop = tmp_path / "stop"
    threading.Timer(1.0, stop.touch).start()
    rc, out = load(server(busy=100000), "--clients", "2", "--seconds", "30", "--until", str(stop))
    assert (rc, out["requests"], out["failed"]) == (0, 0, 0), out
    assert out["abandoned"] == {"overloaded": 2}, out  # each client's request under way
    assert out["refused"]["overloaded"] >= 2, out
