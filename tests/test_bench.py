"""ftfleet/bench.py (ftfleet bench) without a lab: the layers' turns and counts, and the HTTP client
against a local server that streams server-sent events in chunks over one kept connection."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from ftfleet import bench


def fake_layer(name: str, log: list, lock: threading.Lock, fail_every: int = 0):
    count = iter(range(10**6))

    def call():
        with lock:
            n = next(count)
            log.append(name)
        time.sleep(0.002)
        if fail_every and n and n % fail_every == 0:
            raise RuntimeError("HTTP 503")
        return 0.001, 0.002, 0.0005

    call.close = lambda: None
    return call


def test_layers_take_turns_each_round_and_every_request_is_counted():
    log, lock = [], threading.Lock()
    layers = {name: fake_layer(name, log, lock) for name in ("a", "b", "c")}
    results = bench.run_levels(layers, [1, 4], requests=8, rounds=4)
    # concurrency 1: one warm-up each, then 4 rounds of 2 requests, the first layer rotating
    warm, rounds = log[:3], log[3 : 3 + 3 * 8]
    assert sorted(warm) == ["a", "b", "c"]
    firsts = [rounds[i * 6] for i in range(4)]
    assert firsts == ["a", "b", "c", "a"], rounds
    for name in layers:
        one, four = results[name]
        assert (one["concurrency"], one["requests"], one["errors"]) == (1, 8, 0)
        # at least two requests per thread and round: 4 rounds of 8 at concurrency 4
        assert (four["concurrency"], four["requests"]) == (4, 32)
        assert (one["p50_ms"], one["ttft_p50_ms"], one["itl_p50_ms"]) == (2.0, 1.0, 0.5)
        assert 0 < one["requests_per_s"] <= 500
        assert one["client_cpu_ms"] >= 0


def test_failed_requests_are_counted_apart_and_the_level_goes_on():
    log, lock = [], threading.Lock()
    results = bench.run_levels({"x": fake_layer("x", log, lock, fail_every=4)}, [1], requests=12, rounds=2)
    level = results["x"][0]
    assert (level["errors"], level["requests"]) == (3, 9)
    assert level["error_kinds"] == ["RuntimeError: HTTP 503"] * 3


def test_a_layer_that_cannot_answer_stops_the_benchmark_at_its_warm_up():
    def broken():
        raise ConnectionRefusedError("nothing listens")

    broken.close = lambda: None
    with pytest.raises(ConnectionRefusedError):
        bench.run_levels({"down": broken}, [4], requests=8, rounds=1)


class Events(BaseHTTPRequestHandler):
    """A streamed completion in three text chunks and a final one, chunked, on a kept connection."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list] = []

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Events.seen.append((self.path, self.headers["Authorization"], body, self.client_address[1]))
        if body["model"] != "m":
            self.send_response(404)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunks = [{"choices": [{"text": t}]} for t in ("one", " two", " three")] + [{"choices": [{"text": ""}]}]
        for event in [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]:
            data = event.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            time.sleep(0.02)
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def server():
    Events.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Events)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_the_http_client_times_each_event_and_keeps_its_connection(server):
    call = bench.openai_request(server, "k", "m", "Every role", 3)
    first, end, gap = call()
    call()
    call.close()
    # each event timed as it comes: the server pauses 20 ms after each, four times after the first
    # text ([DONE] last, read too) and once between text chunks (buffered, they would come at once).
    # Half of each pause is asserted: the client reads the first text a little late at times, which
    # shortens what it measures after it (9.97 ms for a 10 ms pause once in CI)
    assert end - first >= 0.04
    assert gap >= 0.01
    paths = {(path, auth) for path, auth, _body, _port in Events.seen}
    assert paths == {("/v1/completions", "Bearer k")}
    assert Events.seen[0][2] == {"model": "m", "prompt": "Every role", "max_tokens": 3, "temperature": 0,
                                 "stream": True}  # fmt: skip
    assert len({port for *_rest, port in Events.seen}) == 1  # one connection for both requests


def test_the_http_client_reports_a_refusal(server):
    call = bench.openai_request(server, "k", "other", "x", 3)
    with pytest.raises(RuntimeError, match="HTTP 404"):
        call()
    call.close()
