"""Rounds on a real gateway in front of a real tritonserver (the CPU stand-in as fastertransformer,
paced at 50 ms a step, with dynamic batching and a 100 ms queue delay: a round's slices reach it
within that even on a busy machine): a gateway with slices of 4 answers greedy requests
with the very text of a gateway without rounds; four streams at once reach tritonserver in rounds
that Triton's dynamic batcher makes batches of (its own statistics: fewer executions than
requests), their inputs padded to one width and their texts those of whole generations; and a
whole answer whose client leaves stops at the next slice boundary (Triton's count of the slices
asked, and the gateway's abandoned metric). Bounded: a dozen requests. No
wall-clock bound is asserted; the figures are printed."""

from __future__ import annotations

import concurrent.futures
import json
import time
from pathlib import Path

import pytest
from tritonlocal import gpt_repository, start_gateway, tiny_model, tritonserver

httpx = pytest.importorskip("httpx")
pytest.importorskip("pytriton")
pytest.importorskip("torch")

MODEL, SLICE = "tiny", 4
PROMPTS = ["Ansible automation that takes bare GPU hosts", "Every host with a different GPU count", "The guides"]


def ft_stats(http: int) -> tuple[int, int]:
    """The fastertransformer model's requests and batches (executions) so far."""
    stats = httpx.get(f"http://127.0.0.1:{http}/v2/models/fastertransformer/stats", timeout=10).json()
    model = stats["model_stats"][0]
    return int(model["inference_count"]), int(model["execution_count"])


def metric(url: str, line_start: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no {line_start} in /metrics")


def complete(url: str, prompt: str, tokens: int, **more) -> dict:
    answer = httpx.post(url + "/v1/completions", timeout=120,
                        json={"model": MODEL, "prompt": prompt, "max_tokens": tokens, "temperature": 0,
                              "ignore_eos": True, **more})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return answer.json()


def streamed(url: str, prompt: str, tokens: int) -> str:
    text = ""
    with httpx.stream("POST", url + "/v1/completions", timeout=120,
                      json={"model": MODEL, "prompt": prompt, "max_tokens": tokens, "temperature": 0,
                            "ignore_eos": True, "stream": True}) as answer:  # fmt: skip
        for line in answer.iter_lines():
            if line.startswith("data: {"):
                text += json.loads(line[6:])["choices"][0]["text"]
    return text


def test_rounds_answer_as_whole_generations_batch_in_triton_and_stop_for_a_client_that_left(tmp_path: Path):
    checkpoint = tmp_path / "checkpoint"
    tiny_model("gpt", checkpoint)
    repo = gpt_repository(tmp_path, checkpoint, tp=1, decoupled=True,
                          extra={"triton_model_repo_dynamic_batching": True,
                                 "triton_model_repo_max_queue_delay_us": 100000})  # fmt: skip
    with tritonserver(repo, tmp_path, env={"FTNATIVE_STEP_SECONDS": "0.05"}) as server:
        common = {"model": MODEL, "triton_grpc": f"127.0.0.1:{server.grpc}", "context_length": 128,
                  "max_tokens_limit": 64, "allow_anonymous": True, "checkpoint_dir": str(checkpoint),
                  "tokenizer_dir": str(checkpoint), "max_in_flight": 8}  # fmt: skip
        whole_process, whole, _ = start_gateway({**common, "slice_tokens": 0}, tmp_path)
        sliced_process, sliced, sliced_log = start_gateway({**common, "slice_tokens": SLICE}, tmp_path)
        try:
            # The same greedy answers, token for token (text, usage, log probabilities' count).
            for prompt in PROMPTS[:2]:
                expected, got = complete(whole, prompt, 10, logprobs=0), complete(sliced, prompt, 10, logprobs=0)
                assert got["choices"][0]["text"] == expected["choices"][0]["text"]
                assert got["usage"] == expected["usage"]
                probs = got["choices"][0]["logprobs"]["token_logprobs"]
                assert probs == pytest.approx(expected["choices"][0]["logprobs"]["token_logprobs"], abs=1e-5)
            assert streamed(sliced, PROMPTS[2], 9) == complete(whole, PROMPTS[2], 9)["choices"][0]["text"]

            # Four streams of 12 tokens at once: 3 slices each, sent in rounds that Triton batches
            # (their prompts differ in length: a round's slices are padded to its longest).
            wholes = [complete(whole, PROMPTS[i % 3], 12)["choices"][0]["text"] for i in range(4)]
            requests, batches = ft_stats(server.http)
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                texts = list(pool.map(lambda i: streamed(sliced, PROMPTS[i % 3], 12), range(4)))
            now_requests, now_batches = ft_stats(server.http)
            asked, ran = now_requests - requests, now_batches - batches
            print(f"\nfour streams of 12 tokens in slices of {SLICE}: {asked} requests to fastertransformer "
                  f"in {ran} batches; rounds {metric(sliced, 'ftgateway_round_slices_count'):.0f}")  # fmt: skip
            assert texts == wholes  # the padded rows' answers are the whole generations
            assert asked == 4 * 3  # every slice a request
            assert ran < asked  # Triton's batcher put a round's slices in one execution

            # A whole answer of 48 tokens whose client leaves after about 10 steps: the slice in
            # flight ends, no other is asked (12 slices without the leaving).
            requests, _ = ft_stats(server.http)
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(sliced + "/v1/completions", timeout=0.5,
                           json={"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 48, "temperature": 0,
                                 "ignore_eos": True})  # fmt: skip
            time.sleep(2 * SLICE * 0.05 + 1.0)
            slices = ft_stats(server.http)[0] - requests
            print(f"a whole answer of 48 tokens left after 0.5 s: {slices} slice(s) of {SLICE} asked, not 12")
            assert 1 <= slices <= 4
            assert metric(sliced, 'ftgateway_abandoned_generations_total{answer="whole"}') == 1
        finally:
            for process in (whole_process, sliced_process):
                process.terminate()
                process.wait(timeout=30)
        assert "Traceback" not in sliced_log.read_text()
