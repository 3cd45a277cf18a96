"""Admission on a real gateway (ftgateway/admission.py) in front of a real tritonserver (the CPU
stand-in as fastertransformer, slowed to a GPU's pace per step): with two generation slots and a
queue of two, a key that floods is answered, queued and refused by the rules, a second key gets in
ahead of the flood's queue, every refusal is OpenAI's error with Retry-After, and no slot is left
taken. Bounded: eight requests in all. No wall-clock bound is asserted; the figures are printed."""

from __future__ import annotations

import concurrent.futures
import json
import re
import time
from pathlib import Path

import pytest
from tritonlocal import gpt_repository, start_gateway, tiny_model, tritonserver

httpx = pytest.importorskip("httpx")
pytest.importorskip("pytriton")
pytest.importorskip("torch")

from ftgateway.config import hash_key  # noqa: E402

MODEL, FLOOD, LIGHT = "tiny", "ftf-test-flood-key", "ftf-test-light-key"
PROMPT = "Ansible automation that takes bare GPU hosts"


def metric(url: str, line_start: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no {line_start} in /metrics")


def ask(url: str, key: str, busy_status: str = "") -> tuple[int, dict, dict, float]:
    """(status, body, headers, seconds) of one greedy completion; busy_status asks for busy
    refusals as HAProxy does (X-Ftfleet-Busy-Status)."""
    began = time.monotonic()
    headers = {"Authorization": f"Bearer {key}", **({"X-Ftfleet-Busy-Status": busy_status} if busy_status else {})}
    answer = httpx.post(url + "/v1/completions", timeout=120, headers=headers,
                        json={"model": MODEL, "prompt": PROMPT, "max_tokens": 32, "temperature": 0,
                              "ignore_eos": True})  # fmt: skip
    return answer.status_code, answer.json(), dict(answer.headers), time.monotonic() - began


def test_a_flooding_key_is_queued_and_refused_and_another_key_gets_in_first(tmp_path: Path):
    checkpoint = tmp_path / "checkpoint"
    tiny_model("gpt", checkpoint)
    repo = gpt_repository(tmp_path, checkpoint, tp=1, decoupled=True)  # the stand-in paces a decoupled model's steps
    keys = [{"name": "flood", "sha256": hash_key(FLOOD)}, {"name": "light", "sha256": hash_key(LIGHT)}]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    # The stand-in stops a cancelled stream between steps, as a backend that honours gRPC
    # cancellation does (FT's does not): the client's leaving must reach tritonserver.
    with tritonserver(
        repo, tmp_path, env={"FTNATIVE_STEP_SECONDS": "0.1", "FTNATIVE_HONOUR_CANCELLATION": "1"}
    ) as server:
        settings = {"model": MODEL, "triton_grpc": f"127.0.0.1:{server.grpc}", "context_length": 128,
                    "max_tokens_limit": 64, "keys_file": str(tmp_path / "keys.json"), "max_in_flight": 2,
                    "admission_wait_ms": 60000, "admission_queue": 2, "slo_ttft_ms": 5000,
                    "slo_itl_ms": 1000}  # fmt: skip
        proc, url, log = start_gateway(settings, tmp_path)
        try:
            warm = ask(url, LIGHT)  # the model's first answer
            assert warm[0] == 200, warm
            # What the answer spent of its key's tokens per minute, for the load balancers to count.
            assert warm[2]["x-ftfleet-tokens"] == str(warm[1]["usage"]["total_tokens"])
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                # Every other request of the flood asks as HAProxy does, for busy refusals as 429s.
                flood = [pool.submit(ask, url, FLOOD, "429" if i % 2 else "") for i in range(6)]
                deadline = time.monotonic() + 60
                # Two run and two wait (the other two were refused at once); then the light key asks.
                while metric(url, 'ftgateway_refused_total{reason="overloaded"}') < 2:
                    assert time.monotonic() < deadline, log.read_text()
                    time.sleep(0.05)
                light = pool.submit(ask, url, LIGHT)
                answers = [f.result() for f in flood]
                light_answer = light.result()
            # As a client sees them (HAProxy turns a busy 429 back into the 503 it is).
            statuses = sorted(503 if i % 2 and a[1].get("error", {}).get("code") in ("overloaded", "wait_timeout")
                              else a[0] for i, a in enumerate(answers))  # fmt: skip
            codes = sorted(a[1].get("error", {}).get("code", "") for a in answers if a[0] != 200)
            print(f"flood: {[(a[0], round(a[3], 2)) for a in answers]}; light: {light_answer[0]}, "
                  f"{light_answer[3]:.2f} s")  # fmt: skip
            # Two ran, one queued request of the flood's gave its place to the light key (429), two
            # were refused at once (503: the queue was full of the flood's own), one waited and ran.
            assert statuses == [200, 200, 200, 429, 503, 503], answers
            assert codes == ["over_share", "overloaded", "overloaded"]
            assert light_answer[0] == 200, light_answer
            check_refusals(answers)
            assert metric(url, 'ftgateway_refused_total{reason="over_share"}') == 1
            assert metric(url, 'ftgateway_refused_total{reason="overloaded"}') == 2
            assert metric(url, "ftgateway_in_flight") == 0
            assert metric(url, "ftgateway_waiting") == 0
            # Goodput: a whole answer of 32 steps of 0.1 s meets a 5 s objective alone (the warm-up);
            # the flood's waiter and the light key waited a whole generation (3.2 s) first and did not.
            good, answered = metric(url, "ftgateway_good_total"), 1 + statuses.count(200) + 1
            print(f"goodput: {good:.0f} of {answered} answers met the objectives")
            assert 1 <= good <= answered - 2
            a_stream_holds_its_slot_and_its_cancellation_reaches_tritonserver(url, server.log, warm)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def check_refusals(answers: list) -> None:
    """Every refusal: OpenAI's error with Retry-After and its reason in X-Ftfleet-Refused; a busy
    one a 429 where the request asked as HAProxy does (every other one of the flood)."""
    for i, (status, body, headers, _) in enumerate(answers):
        if status != 200:
            assert headers.get("retry-after") == "1"
            assert set(body["error"]) == {"message", "type", "param", "code"}
            code = body["error"]["code"]
            assert headers.get("x-ftfleet-refused") == code  # what HAProxy tells busy from broken by
            assert status == (429 if i % 2 or code == "over_share" else 503), (i, status, code)


def a_stream_holds_its_slot_and_its_cancellation_reaches_tritonserver(url: str, server_log: Path, warm) -> None:
    """A stream holds its slot while it runs and counts its prompt and max_tokens as it starts; a
    client that leaves mid-stream gives the slot back, and the gateway's cancelled gRPC stream
    stops tritonserver's model before the 32 steps' end."""
    streamed = {"model": MODEL, "prompt": PROMPT, "max_tokens": 32, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", url + "/v1/completions", json=streamed, timeout=60,
                      headers={"Authorization": f"Bearer {LIGHT}"}) as answer:  # fmt: skip
        assert answer.headers["x-ftfleet-tokens"] == str(warm[1]["usage"]["prompt_tokens"] + 32)
        lines = answer.iter_lines()  # kept: a closed iterator closes the response
        first = next(line for line in lines if line.startswith("data: {"))
        assert json.loads(first[6:])["choices"][0]["text"]
        assert metric(url, "ftgateway_in_flight") == 1
    deadline = time.monotonic() + 60
    while metric(url, "ftgateway_in_flight") != 0:
        assert time.monotonic() < deadline, "the stream's slot was never given back"
        time.sleep(0.1)
    deadline = time.monotonic() + 60
    while "ftnative: cancelled after" not in server_log.read_text():
        assert time.monotonic() < deadline, "tritonserver never saw the stream cancelled"
        time.sleep(0.1)
    stopped = re.search(r"ftnative: cancelled after (\d+) of 32 steps", server_log.read_text())
    assert stopped, server_log.read_text()[-2000:]
    print(f"the cancelled stream stopped after {stopped.group(1)} of 32 steps")
    assert int(stopped.group(1)) < 32


def test_tritonservers_queue_policy_refuses_past_its_size_and_the_gateway_says_busy(tmp_path: Path):
    """triton_model_repo's dynamic-batching queue policy on a real tritonserver: batches of one,
    at most one request waiting (triton_model_repo_max_queue_size 1), REJECT past it. Three
    requests at once through a gateway without a bound of its own (max_in_flight 0, rounds off): one runs, at
    most one waits and runs, the rest are refused by tritonserver's queue, which the gateway answers
    as busy (503 overloaded, Retry-After, X-Ftfleet-Refused), never as a broken host (upstream_down)."""
    checkpoint = tmp_path / "checkpoint"
    tiny_model("gpt", checkpoint)
    policy = {"triton_model_repo_dynamic_batching": True, "triton_model_repo_max_batch_size": 1,
              "triton_model_repo_max_queue_size": 1}  # fmt: skip
    repo = gpt_repository(tmp_path, checkpoint, tp=1, decoupled=False, extra=policy)
    config = (repo / "fastertransformer" / "config.pbtxt").read_text()
    assert "timeout_action: REJECT" in config, config
    assert "max_queue_size: 1" in config, config
    keys = [{"name": "light", "sha256": hash_key(LIGHT)}]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    with tritonserver(repo, tmp_path, env={"FTNATIVE_STEP_SECONDS": "0.1"}) as server:
        # Rounds off: a round holds back a request that arrives while one runs (a bound of its
        # own), and this is tritonserver's queue, as clients past the gateway meet it.
        settings = {"model": MODEL, "triton_grpc": f"127.0.0.1:{server.grpc}", "context_length": 128,
                    "max_tokens_limit": 64, "keys_file": str(tmp_path / "keys.json"), "slice_tokens": 0}  # fmt: skip
        proc, url, _log = start_gateway(settings, tmp_path)
        try:
            assert ask(url, LIGHT)[0] == 200  # warm
            with concurrent.futures.ThreadPoolExecutor(3) as pool:
                answers = list(pool.map(lambda _: ask(url, LIGHT), range(3)))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"tritonserver's queue: {[(a[0], a[1].get('error', {}).get('code'), round(a[3], 2)) for a in answers]}")
    # One runs and at most one waits: the third, at least, is refused (two when the batcher still
    # held the first in its queue as the others came, as on a busy machine).
    statuses = sorted(a[0] for a in answers)
    assert statuses in ([200, 200, 503], [200, 503, 503]), answers
    for refused in (a for a in answers if a[0] == 503):
        assert refused[1]["error"]["code"] == "overloaded", refused
        assert "Exceeds maximum queue size" in refused[1]["error"]["message"], refused
        assert refused[2]["retry-after"] == "1"
        assert refused[2]["x-ftfleet-refused"] == "overloaded"
