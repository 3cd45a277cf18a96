"""A generation outlives its tritonserver (ftgateway/continuing.py): two hosts of one model, each a
real tritonserver (the CPU stand-in as fastertransformer, decoupled, at 20 ms a step as a GPU
would take) with its gateway, the gateways each other's peers with the fleet's key. Host A's
tritonserver is killed (SIGKILL) while a stream or a whole request runs on it: the answer must go
on from host B and equal, token for token, the uninterrupted answer; with continuations off the
same kill cuts the stream, so the test can fail."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tritonlocal import free_port, gpt_repository, start_gateway, tiny_model, tritonserver

httpx = pytest.importorskip("httpx")
pytest.importorskip("pytriton")
pytest.importorskip("torch")

from ftgateway.config import hash_key  # noqa: E402

MODEL, KEY, FLEET_KEY = "tiny", "ftf-test-client-key", "ftf-test-fleet-key"
REVISION = "89abcdef0123456789abcdef0123456789abcdef"  # the commit its shards were made from (ftfleet_revision)
PROMPT = "Ansible automation that takes bare GPU hosts"
TOKENS = 200  # a chat reply's length; the model's context is 256
STEP_S = "0.02"


@dataclass
class Host:
    name: str
    url: str = ""
    port: int = field(default_factory=free_port)
    server: object = None
    gateway: object = None
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


@dataclass
class Pair:
    work: Path
    repo: Path
    checkpoint: Path
    a: Host
    b: Host
    extra: list = field(default_factory=list)

    def settings(self, host: Host, **more) -> dict:
        keys = self.work / "keys.json"
        fleet = self.work / "fleet.key"
        return {"model": MODEL, "triton_grpc": f"127.0.0.1:{host.server.grpc}", "context_length": 256,
                "max_tokens_limit": 250, "keys_file": str(keys), "tokenizer_dir": str(self.checkpoint),
                "checkpoint_dir": str(self.checkpoint), "fleet_key_file": str(fleet), **more}  # fmt: skip

    def start_server(self, host: Host) -> None:
        host.stack = contextlib.ExitStack()
        work = self.work / host.name
        work.mkdir(exist_ok=True)
        host.server = host.stack.enter_context(tritonserver(self.repo, work, env={"FTNATIVE_STEP_SECONDS": STEP_S}))

    def alive(self, host: Host) -> None:
        """host's tritonserver running (started again after a test killed it), its gateway ready."""
        if host.server is not None and host.server.process.poll() is None:
            return
        host.stack.close()
        self.start_server(host)
        # The gateway keeps its gRPC channel; it reconnects to the new server's port only if the
        # port is the same, which a new server does not keep: the gateway starts again too.
        self.start_gateway(host, peers=[self.other(host)])

    def other(self, host: Host) -> Host:
        return self.b if host is self.a else self.a

    def start_gateway(self, host: Host, peers: list[Host], **more) -> None:
        if host.gateway is not None:
            host.gateway.terminate()
            host.gateway.wait(timeout=30)
        settings = self.settings(host, peers=[{"url": p.url or f"http://127.0.0.1:{p.port}"} for p in peers], **more)
        host.gateway, host.url, _log = start_gateway(settings, self.work, port=host.port)
        wait_ready(host.url)

    def kill(self, host: Host) -> None:
        os.kill(host.server.process.pid, signal.SIGKILL)
        # Gone before the caller goes on: the next test's alive() asks poll(), which said "running"
        # for a server killed a moment before (CI of ec0afc9: a gateway then waited 60 s for it).
        host.server.process.wait(timeout=30)

    def served_then_killed(self, host: Host) -> None:
        """host's tritonserver killed after one request (its gateway's tokenizer verified), and gone."""
        self.alive(host)
        first = httpx.post(host.url + "/v1/completions", json=body(max_tokens=1), timeout=60,
                           headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
        assert first.status_code == 200, first.text
        self.kill(host)


def wait_ready(url: str) -> None:
    deadline = time.monotonic() + 60
    while httpx.get(url + "/healthz", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, f"{url} never ready"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Iterator[Pair]:
    work = tmp_path_factory.mktemp("continuation")
    checkpoint = work / "checkpoint"
    tiny_model("gpt", checkpoint)
    repo = gpt_repository(work, checkpoint, tp=1, decoupled=True, revision=REVISION)
    (work / "keys.json").write_text(json.dumps({"keys": [{"name": "client", "sha256": hash_key(KEY)}]}))
    (work / "fleet.key").write_text(FLEET_KEY + "\n")
    found = Pair(work, repo, checkpoint, Host("a"), Host("b"))
    try:
        for host in (found.a, found.b):
            found.start_server(host)
        found.a.url, found.b.url = f"http://127.0.0.1:{found.a.port}", f"http://127.0.0.1:{found.b.port}"
        found.start_gateway(found.a, [found.b])
        found.start_gateway(found.b, [found.a])
        yield found
    finally:
        for host in (found.a, found.b):
            if host.gateway is not None:
                host.gateway.terminate()
                host.gateway.wait(timeout=30)
            host.stack.close()
        # All stopped before any is waited for: a gateway stopping waits (its graceful seconds,
        # 30) for a continuation another one still holds open (28 s in test_over_tls_..., when
        # the TLS peer was stopped and waited for first).
        for proc in found.extra:
            proc.terminate()
        for proc in found.extra:
            proc.wait(timeout=30)


def body(**more) -> dict:
    return {"model": MODEL, "prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True, **more}


def streamed(url: str, request: dict, *, after: int = 0, then=None) -> list[dict]:
    """A stream's events; `then()` runs once `after` chunks with text came."""
    events, texts = [], 0
    with httpx.stream("POST", url + "/v1/completions", json={**request, "stream": True}, timeout=120,
                      headers={"Authorization": f"Bearer {KEY}"}) as answer:  # fmt: skip
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            if line == "data: [DONE]":
                events.append("[DONE]")
                continue
            events.append(json.loads(line.removeprefix("data: ")))
            if events[-1].get("choices") and events[-1]["choices"][0]["text"]:
                texts += 1
                if texts == after and then is not None:
                    then()
    return events


def text_of(events: list) -> str:
    return "".join(e["choices"][0]["text"] for e in events if isinstance(e, dict) and e.get("choices"))


def metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in {url}/metrics")


@pytest.fixture(scope="module")
def uninterrupted(pair) -> dict:
    """The answer nothing interrupted (host B), whole, with its usage."""
    answer = httpx.post(pair.b.url + "/v1/completions", json=body(), timeout=120,
                        headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_stream_goes_on_from_another_host_when_its_tritonserver_is_killed(pair, uninterrupted):
    pair.alive(pair.a)
    continued = metric(pair.a.url, 'ftgateway_continuations_total{outcome="continued"}')
    served = metric(pair.b.url, "ftgateway_continued_for_peers_total")
    began = time.monotonic()
    events = streamed(pair.a.url, body(stream_options={"include_usage": True}), after=5,
                      then=lambda: pair.kill(pair.a))  # fmt: skip
    took = time.monotonic() - began
    assert events[-1] == "[DONE]"
    errors = [e for e in events if isinstance(e, dict) and "error" in e]
    assert not errors, errors
    assert pair.a.server.process.poll() is not None  # it was killed mid-stream
    expected = uninterrupted["choices"][0]["text"]
    assert text_of(events) == expected
    assert len(expected) > 200
    ends = [e["choices"][0]["finish_reason"] for e in events if isinstance(e, dict) and e.get("choices")]
    assert ends[-1] == uninterrupted["choices"][0]["finish_reason"] == "length"
    assert events[-2]["usage"] == uninterrupted["usage"]  # the client's tokens counted once
    assert len({e["id"] for e in events if isinstance(e, dict)}) == 1
    assert metric(pair.a.url, 'ftgateway_continuations_total{outcome="continued"}') == continued + 1
    assert metric(pair.b.url, "ftgateway_continued_for_peers_total") == served + 1
    # The continuation is no client's request on host B: its requests count only its own clients'.
    assert "/internal/" not in httpx.get(pair.b.url + "/metrics", timeout=10).text
    added = metric(pair.a.url, "ftgateway_continuation_seconds_sum")
    print(f"\n{TOKENS} tokens streamed in {took:.2f} s, continued on host B; the continuation added {added:.3f} s")


def test_a_whole_request_goes_on_from_another_host(pair, uninterrupted):
    pair.alive(pair.a)
    request = body()
    killer = _kill_after(pair, pair.a, 1.0)
    answer = httpx.post(pair.a.url + "/v1/completions", json=request, timeout=120,
                        headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
    killer.join()
    assert pair.a.server.process.poll() is not None, "the kill came after the answer: nothing was tested"
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"] == uninterrupted["choices"]
    assert answer.json()["usage"] == uninterrupted["usage"]


def test_a_request_to_a_host_whose_tritonserver_is_gone_is_served_by_another(pair, uninterrupted):
    """Killed before the request: the gateway tokenizes itself (its tokenizer was verified with its
    first request), the model's first step fails, and the whole generation comes from host B."""
    pair.served_then_killed(pair.a)
    events = streamed(pair.a.url, body())
    assert events[-1] == "[DONE]"
    assert text_of(events) == uninterrupted["choices"][0]["text"]


def test_a_beam_search_is_not_continued_but_answered_as_retryable(pair):
    """Beams change until FT's last step: nothing to go on from. The gateway answers 503 with
    Retry-After (nothing was sent), which HAProxy retries on another host."""
    pair.served_then_killed(pair.a)
    request = {"model": MODEL, "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "n": 2, "best_of": 2}
    answer = httpx.post(pair.a.url + "/v1/completions", json=request, timeout=60,
                        headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
    assert (answer.status_code, answer.headers.get("retry-after")) == (503, "1"), answer.text
    assert "a beam search (best_of or n above 1) is not continued on another host" in answer.json()["error"]["message"]


def test_with_continuations_off_the_same_kill_cuts_the_stream(pair, uninterrupted):
    pair.alive(pair.a)
    proc, url, _log = start_gateway(pair.settings(pair.a, peers=[{"url": pair.b.url}], continuations=0), pair.work)
    pair.extra.append(proc)
    wait_ready(url)
    events = streamed(url, body(), after=5, then=lambda: pair.kill(pair.a))
    errors = [e["error"] for e in events if isinstance(e, dict) and "error" in e]
    assert errors, "the stream was not cut: the kill did not reach it"
    assert errors[0]["code"] == "upstream_down", errors
    assert len(text_of(events)) < len(uninterrupted["choices"][0]["text"])


def test_with_no_other_host_up_the_stream_ends_with_an_error_that_says_so(pair):
    pair.alive(pair.a)
    dead = f"http://127.0.0.1:{free_port()}"
    proc, url, _log = start_gateway(pair.settings(pair.a, peers=[{"url": dead}]), pair.work)
    pair.extra.append(proc)
    wait_ready(url)
    failed = metric(url, 'ftgateway_continuations_total{outcome="failed"}')
    events = streamed(url, body(), after=5, then=lambda: pair.kill(pair.a))
    errors = [e["error"] for e in events if isinstance(e, dict) and "error" in e]
    assert len(errors) == 1, events[-3:]
    assert errors[0]["code"] == "continuation_failed"
    assert "no other host of the model could continue" in errors[0]["message"]
    assert dead in errors[0]["message"]
    assert metric(url, 'ftgateway_continuations_total{outcome="failed"}') == failed + 1


def test_the_internal_routes_take_the_fleet_key_only(pair, uninterrupted):
    pair.alive(pair.b)
    greedy = {"runtime_top_k": 1, "runtime_top_p": 0.0, "temperature": 1.0, "random_seed": 0}
    request = {"model": MODEL, "ids": [1, 2, 3], "max_tokens": 4, "sampling": greedy}
    for key in (KEY, "", "ftf-wrong"):
        refused = httpx.post(pair.b.url + "/internal/v1/continue", json=request, timeout=30,
                             headers={"Authorization": f"Bearer {key}"} if key else {})  # fmt: skip
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "invalid_fleet_key"
    fleet = {"Authorization": f"Bearer {FLEET_KEY}"}
    answer = httpx.post(pair.b.url + "/internal/v1/continue", json=request, timeout=30, headers=fleet)
    lines = [json.loads(line) for line in answer.text.splitlines() if line]
    assert answer.status_code == 200
    assert [len(line["ids"]) for line in lines] == [1, 2, 3, 4]
    # The fleet key is no client key.
    client = httpx.post(pair.b.url + "/v1/completions", json=body(max_tokens=1), timeout=30, headers=fleet)
    assert client.status_code == 401
    # A continuation past the context is refused by name, before the model runs.
    long = httpx.post(pair.b.url + "/internal/v1/continue", json={**request, "max_tokens": 254}, timeout=30,
                      headers=fleet)  # fmt: skip
    assert (long.status_code, long.json()["error"]["code"]) == (400, "context_length_exceeded")
    # A generation another revision began goes on elsewhere: its tokens would go on with other weights.
    other = httpx.post(pair.b.url + "/internal/v1/continue", json={**request, "revision": "f" * 40}, timeout=30,
                       headers=fleet)  # fmt: skip
    assert (other.status_code, other.json()["error"]["code"]) == (409, "revision_differs")
    same = httpx.post(pair.b.url + "/internal/v1/continue", json={**request, "revision": REVISION}, timeout=30,
                      headers=fleet)  # fmt: skip
    assert same.status_code == 200, same.text


def _kill_after(pair: Pair, host: Host, seconds: float):
    import threading  # noqa: PLC0415

    thread = threading.Thread(target=lambda: (time.sleep(seconds), pair.kill(host)), daemon=True)
    thread.start()
    return thread


def test_over_tls_the_peer_is_verified_by_its_name(pair, uninterrupted, tmp_path):
    """Peers serving HTTPS (production: the fleet's TLS) are verified against gateway_peer_ca as
    their tls_name: the right name continues, a wrong one is refused (the stream ends saying so)."""
    import subprocess  # noqa: PLC0415

    cert, key = tmp_path / "b.pem", tmp_path / "b.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=gpu-b",
                    "-addext", "subjectAltName=DNS:gpu-b.example,IP:127.0.0.1", "-keyout", str(key), "-out",
                    str(cert)], check=True, capture_output=True)  # fmt: skip
    pair.alive(pair.b)
    proc, tls_b, _log = start_gateway(pair.settings(pair.b), pair.work, str(cert), str(key))
    pair.extra.append(proc)
    for name, continues in (("gpu-b.example", True), ("gpu-c.example", False)):
        pair.alive(pair.a)
        peers = [{"url": tls_b, "tls_name": name}]
        proc, url, _log = start_gateway(pair.settings(pair.a, peers=peers, peer_ca_file=str(cert)), pair.work)
        pair.extra.append(proc)
        wait_ready(url)
        events = streamed(url, body(), after=5, then=lambda: pair.kill(pair.a))
        errors = [e["error"] for e in events if isinstance(e, dict) and "error" in e]
        if continues:
            assert not errors, errors
            assert text_of(events) == uninterrupted["choices"][0]["text"]
        else:
            assert len(errors) == 1, events[-3:]
            assert errors[0]["code"] == "continuation_failed"
            assert "CERTIFICATE_VERIFY_FAILED" in errors[0]["message"] or "certificate" in errors[0]["message"]
