"""ftgateway against a real tritonserver serving a repository that triton_model_repo wrote (the
gpt family, tp 2, the CPU stand-in as fastertransformer): the gateway runs as `python -m ftgateway`
on 127.0.0.1 and is called over HTTP. Once with the repository as written by default, once with
triton_model_repo_decoupled: true (token streaming)."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import BIN, ROOT
from tritonlocal import free_port, gpt_repository, start_gateway, tiny_model, tritonserver

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
httpx = pytest.importorskip("httpx")
pytest.importorskip("pytriton")
from prometheus_client import generate_latest  # noqa: E402

from ftgateway.app import Metrics  # noqa: E402
from ftgateway.config import hash_key  # noqa: E402
from ftnative.decode import load  # noqa: E402

MODEL = "tiny"
KEY, SLOW_KEY = "ftf-test-key-one", "ftf-test-key-slow"
PROMPT = "Ansible automation that takes bare GPU hosts"
# h2oGPT's prompt form (<human>: ... <bot>:) as a chat template, as the gateway role writes one.
H2O_TEMPLATE = (
    "{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}\n"
    "{% elif m.role == 'user' %}<human>: {{ m.content }}\n{% else %}<bot>: {{ m.content }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<bot>:{% endif %}"
)
REVISION = "0123456789abcdef0123456789abcdef01234567"  # the commit the repository's shards were made from
NEXT_REVISION = "fedcba9876543210fedcba9876543210fedcba98"
CHAT = [{"role": "system", "content": "Ansible automation"}, {"role": "user", "content": "takes bare GPU hosts"}]
CHAT_PROMPT = "Ansible automation\n<human>: takes bare GPU hosts\n<bot>:"


@dataclass
class Front:
    url: str
    decoupled: bool
    keys_file: Path
    tokenizer: object
    model: object
    shards: Path
    triton_grpc: str
    checkpoint: Path

    def post(self, path: str, body, key: str | None = KEY, **kw) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.post(self.url + path, json=body, headers=headers, timeout=120, **kw)

    def complete(self, **body) -> dict:
        answer = self.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, **body})
        assert answer.status_code == 200, answer.text
        return answer.json()

    def stream(self, **body) -> tuple[httpx.Response, list]:
        headers = {"Authorization": f"Bearer {KEY}"}
        request = {"model": MODEL, "prompt": PROMPT, "stream": True, **body}
        with httpx.stream("POST", self.url + "/v1/completions", json=request, headers=headers, timeout=120) as r:
            lines = [line for line in r.iter_lines() if line]
        assert lines[-1] == "data: [DONE]", lines
        return r, [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


def _gateway(settings: dict, work: Path, *tls: str) -> tuple[subprocess.Popen, str]:
    proc, url, _log = start_gateway(settings, work, *tls)
    return proc, url


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "decoupled"])
def front(request, tmp_path_factory) -> Iterator[Front]:
    work = tmp_path_factory.mktemp("front")
    checkpoint = work / "checkpoint"
    tokenizer, model = tiny_model("gpt", checkpoint)
    repo = gpt_repository(work, checkpoint, tp=2, decoupled=request.param, revision=REVISION)
    shards = repo / "fastertransformer" / "1" / "2-gpu"
    keys_file = work / "keys.json"
    keys = [{"name": "one", "sha256": hash_key(KEY)},
            {"name": "slow", "sha256": hash_key(SLOW_KEY), "rate_per_minute": 3}]  # fmt: skip
    keys_file.write_text(json.dumps({"keys": keys}))
    with tritonserver(repo, work) as server:
        settings = {"model": MODEL, "triton_grpc": f"127.0.0.1:{server.grpc}", "context_length": 128,
                    "max_tokens_limit": 64, "max_request_bytes": 4096, "keys_file": str(keys_file),
                    "chat_template": H2O_TEMPLATE,
                    # the decoupled front tokenizes in the gateway (tokens.py), the plain one calls the models
                    "tokenizer_dir": str(checkpoint) if request.param else "",
                    "checkpoint_dir": str(checkpoint)}  # fmt: skip
        proc, url = _gateway(settings, work)
        try:
            yield Front(url, request.param, keys_file, tokenizer, model, shards, settings["triton_grpc"], checkpoint)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def reference(front: Front, new: int) -> str:
    """transformers' greedy generate() on the same model: the prompt and what follows it, special
    tokens left out (as the gateway answers)."""
    ids = front.tokenizer.encode(PROMPT)
    front.model.generation_config.eos_token_id = front.tokenizer.eos_token_id
    with torch.no_grad():
        out = front.model.generate(torch.tensor([ids]), max_new_tokens=new, do_sample=False,
                                   pad_token_id=front.tokenizer.eos_token_id)[0].tolist()  # fmt: skip
    return front.tokenizer.decode(out, skip_special_tokens=True)


def test_a_greedy_completion_equals_transformers_with_usage(front):
    answer = front.complete(max_tokens=12, temperature=0)
    choice = answer["choices"][0]
    assert PROMPT + choice["text"] == reference(front, 12)
    assert answer["object"] == "text_completion"
    assert answer["model"] == MODEL
    prompt_tokens = len(front.tokenizer.encode(PROMPT))
    assert answer["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 12,
                               "total_tokens": prompt_tokens + 12}  # fmt: skip
    assert choice["finish_reason"] == "length"
    simple = front.post("/generate", {"prompt": PROMPT, "max_tokens": 12})
    assert simple.status_code == 200, simple.text
    assert simple.json()["text"] == choice["text"]


def test_every_answer_names_the_revision_that_made_it(front):
    """OpenAI's system_fingerprint: the revision in the fastertransformer config that tritonserver
    loaded (role triton_model_repo writes it), in whole answers, chat answers and every chunk."""
    fingerprint = "fp_" + REVISION[:12]
    assert front.complete(max_tokens=4, temperature=0)["system_fingerprint"] == fingerprint
    _, chunks = front.stream(max_tokens=4, temperature=0)
    assert {c["system_fingerprint"] for c in chunks} == {fingerprint}
    answer = front.post("/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 4})
    assert answer.status_code == 200, answer.text
    assert answer.json()["system_fingerprint"] == fingerprint


def test_streaming_returns_the_same_text_in_chunks(front):
    whole = front.complete(max_tokens=10, temperature=0)["choices"][0]["text"]
    response, chunks = front.stream(max_tokens=10, temperature=0)
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"][0]["text"]]
    assert "".join(texts) == whole
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all("usage" not in c for c in chunks)  # only when asked (stream_options.include_usage)
    _, counted = front.stream(max_tokens=10, temperature=0, stream_options={"include_usage": True})
    assert "".join(c["choices"][0]["text"] for c in counted[:-1]) == whole
    assert all(c["usage"] is None for c in counted[:-1])
    assert counted[-1]["choices"] == []
    assert counted[-1]["usage"]["completion_tokens"] == 10
    assert counted[-2]["choices"][0]["finish_reason"] == "length"
    if front.decoupled:
        # one response per generated token from the model: several chunks, none claiming otherwise
        assert response.headers["x-ftfleet-streaming"] == "tokens"
        assert len(texts) >= 5, texts
        assert all("ftfleet_streaming" not in c for c in chunks)
    else:
        assert response.headers["x-ftfleet-streaming"] == "buffered"
        assert len(texts) == 1
        assert "not decoupled" in chunks[0]["ftfleet_streaming"]


def test_sampling_parameters_reach_the_model(front):
    """A sampled completion equals the stand-in's own sampling with the same top_k, top_p,
    temperature and seed: the parameters went through to the fastertransformer model."""
    params = {"temperature": 0.7, "top_k": 5, "top_p": 0.9, "seed": 1234}
    answer = front.complete(max_tokens=8, **params)
    again = front.complete(max_tokens=8, **params)
    assert answer["choices"][0]["text"] == again["choices"][0]["text"]  # same seed, same text
    model, ids = load(front.shards), front.tokenizer.encode(PROMPT)
    new = model.generate(ids, 8, top_k=5, top_p=0.9, temperature=0.7, seed=1234, end_id=front.tokenizer.eos_token_id)
    assert PROMPT + answer["choices"][0]["text"] == front.tokenizer.decode(ids + new)
    greedy = front.complete(max_tokens=8, temperature=0)["choices"][0]["text"]
    others = {front.complete(max_tokens=8, temperature=1.0, seed=s)["choices"][0]["text"] for s in (1, 2, 3)}
    assert others != {greedy}


def test_ignore_eos_and_min_tokens_hold_the_end_of_text_back_and_usage_can_come_with_every_chunk(front):
    """vLLM's extras that GuideLLM sends with every request: ignore_eos and min_tokens become FT's
    min_length (the end id masked below it), so an answer that sampling ends early runs to
    max_tokens, or at least to min_tokens, each equal to the stand-in's own decoding with that
    min_length; stream_options.continuous_usage_stats puts the usage so far in every chunk."""
    model, ids, eos = load(front.shards), front.tokenizer.encode(PROMPT), front.tokenizer.eos_token_id
    sampled = {"temperature": 2.0, "top_k": 0, "top_p": 1.0}
    decode = lambda seed, **more: model.generate(ids, 20, end_id=eos, seed=seed, **sampled, **more)  # noqa: E731
    seed = next(s for s in range(1000) if 2 < len(decode(s)) < 20 and decode(s)[-1] == eos)
    ended = decode(seed)
    plain = front.complete(max_tokens=20, seed=seed, **sampled)
    assert plain["choices"][0]["finish_reason"] == "stop", plain
    assert plain["usage"]["completion_tokens"] < 20, plain

    held = front.complete(max_tokens=20, seed=seed, ignore_eos=True, **sampled)
    assert held["choices"][0]["finish_reason"] == "length", held
    assert held["usage"]["completion_tokens"] == 20, held
    assert PROMPT + held["choices"][0]["text"] == front.tokenizer.decode(ids + decode(seed, min_length=21))
    least = len(ended) + 2  # past where sampling ended it
    atleast = front.complete(max_tokens=20, seed=seed, min_tokens=least, **sampled)
    assert atleast["usage"]["completion_tokens"] >= least, atleast
    expected = [t for t in decode(seed, min_length=least + 1) if t != eos]
    assert PROMPT + atleast["choices"][0]["text"] == front.tokenizer.decode(ids + expected)

    over = front.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "min_tokens": 5})
    assert (over.status_code, over.json()["error"]["param"]) == (400, "min_tokens"), over.text
    beams = front.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "temperature": 0,
                                           "best_of": 2, "ignore_eos": True})  # fmt: skip
    assert (beams.status_code, beams.json()["error"]["param"]) == (400, "ignore_eos"), beams.text

    options = {"include_usage": True, "continuous_usage_stats": True}
    _, chunks = front.stream(max_tokens=12, seed=seed, ignore_eos=True, stream_options=options, **sampled)
    counted = [c["usage"] for c in chunks if c["choices"]]
    assert all(u["prompt_tokens"] == len(ids) for u in counted), counted
    made = [u["completion_tokens"] for u in counted]
    assert made == sorted(made), made
    assert made[0] > 0, made
    assert made[-1] == 12, made
    whole = {"prompt_tokens": len(ids), "completion_tokens": 12, "total_tokens": len(ids) + 12}
    assert chunks[-1]["usage"] == whole
    wrong = front.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, "stream": True,
                                           "stream_options": {"include_usage": True, "per_token": True}})  # fmt: skip
    assert (wrong.status_code, wrong.json()["error"]["param"]) == (400, "stream_options"), wrong.text


@pytest.mark.parametrize(("param", "values"), [("repetition_penalty", (1.8, 3.0, 6.0)),
                                               ("presence_penalty", (1.0, 2.0, -2.0))])  # fmt: skip
def test_each_penalty_of_the_sampling_contract_reaches_the_model(front, param, values):
    """The parameters FT takes as they are (sampling.DIRECT): FT's repetition_penalty (an extra,
    as vLLM and TGI accept it) and OpenAI's presence_penalty (FT's additive penalty): the greedy
    completion equals the stand-in's own decoding with that penalty, and differs without it; chat
    takes it too; the two together are refused (FT takes one). 40 tokens, so that the plain
    decoding repeats some (a penalty changes nothing otherwise); the value is the first of a few
    that changes this random model's decoding (the tiny model's tokenizer learns from the docs, so
    its tokens change with them)."""
    model, ids = load(front.shards), front.tokenizer.encode(PROMPT)
    eos, new = front.tokenizer.eos_token_id, 40
    plain = model.generate(ids, new, end_id=eos)
    tried = {v: model.generate(ids, new, end_id=eos, **{param: v}) for v in values}
    value, expected = next((v, out) for v, out in tried.items() if out != plain)
    penalised = front.complete(max_tokens=new, temperature=0, **{param: value})["choices"][0]["text"]
    assert PROMPT + penalised == front.tokenizer.decode(ids + expected)
    assert PROMPT + front.complete(max_tokens=new, temperature=0)["choices"][0]["text"] == front.tokenizer.decode(
        ids + plain)  # fmt: skip
    both = front.post("/v1/completions", {"model": MODEL, "prompt": PROMPT, "repetition_penalty": 1.5,
                                          "presence_penalty": 1.0})  # fmt: skip
    assert (both.status_code, both.json()["error"]["param"]) == (400, "repetition_penalty"), both.text
    assert "cannot be combined" in both.json()["error"]["message"]
    chat = front.post("/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 4, param: value})
    assert chat.status_code == 200, chat.text


def test_best_of_and_n_are_ft_beam_search(front):
    """best_of 3, n 2 at temperature 0: FT's beam search with 3 beams, the 2 best returned in
    order (the stand-in's own beam search on the same shards, with the guides' len_penalty 1.0,
    which the gateway sends unless length_penalty says otherwise); usage counts all 3 beams."""
    model, ids = load(front.shards), front.tokenizer.encode(PROMPT)
    beams = model.beam_search(ids, 8, 3, end_id=front.tokenizer.eos_token_id, len_penalty=1.0)
    answer = front.complete(max_tokens=8, temperature=0, best_of=3, n=2)
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    assert [PROMPT + c["text"] for c in answer["choices"]] == [front.tokenizer.decode(b.tokens) for b in beams[:2]]
    assert answer["usage"]["completion_tokens"] == sum(len(b.tokens) - len(ids) for b in beams)


_UNEVEN_BEAMS: dict[str, str] = {}  # the shards' directory -> a prompt whose beams end at different lengths


def test_length_penalty_ranks_the_beams_as_ft_does(front):
    """length_penalty is FT's len_penalty: 0 ranks beams by cumulative log probability alone,
    other values by it over length ** penalty, each as the stand-in's beam search ranks them.
    A penalty changes a ranking only where beams end at different lengths (at the end id), so the
    prompt is the first of a few whose beams the stand-in ends unevenly (a word and a token of the
    vocabulary: a random model rarely ends), and whose ranking differs under 1.0 and 0: a penalty
    the gateway did not send would fail here."""
    model, eos = load(front.shards), front.tokenizer.eos_token_id

    def beams(prompt: str, penalty: float) -> list:
        return model.beam_search(front.tokenizer.encode(prompt), 16, 8, end_id=eos, len_penalty=penalty)

    def ranked(prompt: str, penalty: float) -> list[str]:
        return [front.tokenizer.decode(b.tokens, skip_special_tokens=True) for b in beams(prompt, penalty)]

    def uneven(prompt: str) -> bool:
        found = beams(prompt, 0.0)
        return len({len(b.tokens) for b in found}) > 1 and ranked(prompt, 1.0) != ranked(prompt, 0.0)

    if str(front.shards) not in _UNEVEN_BEAMS:
        words = PROMPT.split()
        vocab = [front.tokenizer.decode([i]) for i in range(len(front.tokenizer)) if i != eos]
        candidates = (f"{w}{v}" for w in words[1:] + words[:1] for v in vocab)
        _UNEVEN_BEAMS[str(front.shards)] = next((p for p in candidates if p.strip() and uneven(p)), "")
    prompt = _UNEVEN_BEAMS[str(front.shards)]
    assert prompt, "no candidate prompt has beams of different lengths: pick others"
    for penalty in (1.0, 0.0, 2.0):
        answer = front.post(
            "/v1/completions",
            {
                "model": MODEL,
                "prompt": prompt,
                "max_tokens": 16,
                "temperature": 0,
                "best_of": 8,
                "n": 8,
                "length_penalty": penalty,
            },
        )
        assert answer.status_code == 200, answer.text
        got = [prompt + c["text"] for c in answer.json()["choices"]]
        assert got == ranked(prompt, penalty), f"length_penalty {penalty}, prompt {prompt!r}"


def _check_logprobs(choice: dict, expected: list[float]) -> None:
    """OpenAI's shape: the tokens are the text, piece by piece, at their offsets; the values are
    the reference's within 1e-4."""
    logprobs = choice["logprobs"]
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert logprobs["text_offset"] == [sum(map(len, logprobs["tokens"][:i])) for i in range(len(logprobs["tokens"]))]
    np.testing.assert_allclose(logprobs["token_logprobs"], expected[: len(logprobs["tokens"])], atol=1e-4)


def test_logprobs_are_fts_output_log_probs(front):
    """logprobs 1 at temperature 0: the same greedy text, each token's full log probability
    (FT's top-p path with a tiny top_p, see ftgateway.sampling.GREEDY_TOP_P) equal to transformers'
    log_softmax of its scores, and the chosen token as the top entry. Sampled (logprobs 0) and
    beam searched (best_of 2), the values are what the stand-in's FT decoding reports."""
    ids, eos = front.tokenizer.encode(PROMPT), front.tokenizer.eos_token_id
    with torch.no_grad():
        out = front.model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, output_scores=True,
                                   return_dict_in_generate=True, pad_token_id=eos)  # fmt: skip
    new = out.sequences[0, len(ids) :].tolist()
    full = [float(torch.log_softmax(score[0].double(), -1)[t]) for score, t in zip(out.scores, new, strict=True)]
    greedy = front.complete(max_tokens=8, temperature=0)["choices"][0]
    choice = front.complete(max_tokens=8, temperature=0, logprobs=1)["choices"][0]
    assert choice["text"] == greedy["text"]
    assert greedy["logprobs"] is None
    _check_logprobs(choice, full)
    top = choice["logprobs"]["top_logprobs"]
    assert top == [{t: v} for t, v in zip(choice["logprobs"]["tokens"], choice["logprobs"]["token_logprobs"],
                                          strict=True)]  # fmt: skip
    model = load(front.shards)
    sampled = front.complete(max_tokens=8, temperature=0.8, top_k=0, top_p=0.9, seed=21, logprobs=0)["choices"][0]
    steps = list(model.steps(ids, 8, top_k=0, top_p=0.9, temperature=0.8, seed=21, end_id=eos))
    assert PROMPT + sampled["text"] == front.tokenizer.decode(ids + [s.token for s in steps])
    assert sampled["logprobs"]["top_logprobs"] is None
    _check_logprobs(sampled, [s.log_prob for s in steps])
    beams = model.beam_search(ids, 8, 2, end_id=eos)
    searched = front.complete(max_tokens=8, temperature=0, best_of=2, n=2, logprobs=0)["choices"]
    for choice, beam in zip(searched, beams, strict=True):
        _check_logprobs(choice, beam.log_probs)


def test_the_openai_client_works_with_fts_parameters(front):
    """The openai Python client, as users call the gateway: greedy, echo, n/best_of, logprobs and
    repetition_penalty (extra_body) give the same answers as the plain HTTP requests."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=front.url + "/v1", api_key=KEY, max_retries=0)
    asked = {"model": MODEL, "prompt": PROMPT, "max_tokens": 8, "temperature": 0}
    for extra in ({}, {"echo": True}, {"n": 2, "best_of": 3}, {"logprobs": 1}):
        got = client.completions.create(**asked, **extra)
        want = front.complete(max_tokens=8, temperature=0, **extra)
        assert [c.text for c in got.choices] == [c["text"] for c in want["choices"]], extra
        assert got.usage.completion_tokens == want["usage"]["completion_tokens"]
        if "logprobs" in extra:
            assert got.choices[0].logprobs.token_logprobs == want["choices"][0]["logprobs"]["token_logprobs"]
            assert got.choices[0].logprobs.tokens == want["choices"][0]["logprobs"]["tokens"]
    penalised = client.completions.create(**asked, extra_body={"repetition_penalty": 1.8})
    assert penalised.choices[0].text == front.complete(max_tokens=8, temperature=0, repetition_penalty=1.8)[
        "choices"][0]["text"]  # fmt: skip
    beams = {"n": 3, "best_of": 3, "length_penalty": 0.0}
    ranked = client.completions.create(**asked, n=3, best_of=3, extra_body={"length_penalty": 0.0})
    assert [c.text for c in ranked.choices] == [c["text"] for c in front.complete(**asked, **beams)["choices"]]
    streamed = client.completions.create(**asked, stream=True)
    assert "".join(chunk.choices[0].text for chunk in streamed if chunk.choices) == front.complete(
        max_tokens=8, temperature=0)["choices"][0]["text"]  # fmt: skip
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(**asked, logprobs=3)
    assert refused.value.body["param"] == "logprobs"


def test_a_list_of_prompts_is_answered_as_each_prompt_alone(front):
    """prompt as a list (OpenAI's batch): one choice per prompt, index i for prompt i (i * n + j
    with n), each equal to the prompt's answer asked alone, usage their sum; streamed, each index's
    chunks join to that text and end once; the openai client too."""
    prompts = [PROMPT, "GPU hosts", PROMPT + " and"]
    alone = [front.complete(prompt=p, max_tokens=8, temperature=0) for p in prompts]
    batch = front.complete(prompt=prompts, max_tokens=8, temperature=0)
    assert [c["index"] for c in batch["choices"]] == [0, 1, 2]
    assert [c["text"] for c in batch["choices"]] == [a["choices"][0]["text"] for a in alone]
    assert [c["finish_reason"] for c in batch["choices"]] == [a["choices"][0]["finish_reason"] for a in alone]
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert batch["usage"][key] == sum(a["usage"][key] for a in alone), key

    _, chunks = front.stream(prompt=prompts, max_tokens=8, temperature=0, stream_options={"include_usage": True})
    texts, ends = ["", "", ""], [0, 0, 0]
    for chunk in chunks:
        for choice in chunk["choices"]:
            texts[choice["index"]] += choice["text"]
            ends[choice["index"]] += choice["finish_reason"] is not None
    assert texts == [a["choices"][0]["text"] for a in alone]
    assert ends == [1, 1, 1]
    assert chunks[-1]["usage"] == batch["usage"]

    beams = front.complete(prompt=prompts[:2], max_tokens=8, temperature=0, n=2, best_of=3)
    each = [front.complete(prompt=p, max_tokens=8, temperature=0, n=2, best_of=3) for p in prompts[:2]]
    assert [c["index"] for c in beams["choices"]] == [0, 1, 2, 3]
    assert [c["text"] for c in beams["choices"]] == [c["text"] for a in each for c in a["choices"]]
    assert beams["usage"]["completion_tokens"] == sum(a["usage"]["completion_tokens"] for a in each)

    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=front.url + "/v1", api_key=KEY, max_retries=0)
    got = client.completions.create(model=MODEL, prompt=prompts, max_tokens=8, temperature=0)
    assert [c.text for c in sorted(got.choices, key=lambda c: c.index)] == [c["text"] for c in batch["choices"]]


def test_chat_is_the_completion_of_the_conversation_in_the_models_template(front):
    """/v1/chat/completions renders the messages with the chat template and generates exactly what
    /v1/completions generates for that prompt, whole and streamed, in OpenAI's chat shapes."""
    whole = front.post("/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 10, "temperature": 0})
    assert whole.status_code == 200, whole.text
    answer = whole.json()
    same = front.post("/v1/completions", {"model": MODEL, "prompt": CHAT_PROMPT, "max_tokens": 10, "temperature": 0})
    assert answer["object"] == "chat.completion"
    assert answer["id"].startswith("chatcmpl-")
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": same.json()["choices"][0]["text"]}
    assert answer["choices"][0]["finish_reason"] == same.json()["choices"][0]["finish_reason"]
    assert answer["usage"] == same.json()["usage"]
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 10, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    with httpx.stream("POST", front.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"},
                      timeout=120) as r:  # fmt: skip
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == answer["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == answer["choices"][0]["finish_reason"]
    assert (chunks[-1]["choices"], chunks[-1]["usage"]) == ([], answer["usage"])


def test_the_openai_client_chats(front):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=front.url + "/v1", api_key=KEY, max_retries=0)
    asked = {"model": MODEL, "messages": CHAT, "max_tokens": 8, "temperature": 0}
    want = front.complete(prompt=CHAT_PROMPT, max_tokens=8, temperature=0)["choices"][0]["text"]
    got = client.chat.completions.create(**asked)
    assert got.choices[0].message.content == want
    assert got.choices[0].message.role == "assistant"
    streamed = client.chat.completions.create(**asked, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == want
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**asked, n=2)
    assert refused.value.body["param"] == "n"


@pytest.mark.parametrize(
    ("change", "param", "words"),
    [
        ({"messages": []}, "messages", "messages is empty"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role", "unknown role 'wizard'"),
        ({"messages": [{"role": "user", "content": ""}]}, "messages[0].content", "the message is empty"),
        ({"messages": [{"role": "user", "content": "GPU hosts " * 200}]}, "prompt", "over the model's context"),
        ({"logprobs": True}, "logprobs", "/v1/completions"),
        ({"frequency_penalty": 0.5}, "frequency_penalty", "not supported"),
        ({"logit_bias": {"3": 20}}, "logit_bias", "can only ban"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed with stream true"),
        ({"tools": []}, "tools", "unknown parameter"),
    ],
)
def test_bad_chat_requests_get_an_openai_error(front, change, param, words):
    answer = front.post("/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 4, **change})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["type"]) == (param, "invalid_request_error"), error
    assert words in error["message"], error


def test_a_chat_template_renders_refuses_or_is_missing():
    """The template in its sandbox, without a server: the prompt it renders, its own refusal
    (raise_exception, as transformers' templates use it), no template, and one that does not compile."""
    from ftgateway.chat import ChatError, Message, Template  # noqa: PLC0415
    from ftgateway.config import ConfigError  # noqa: PLC0415

    messages = [Message(**m) for m in CHAT]
    assert Template(H2O_TEMPLATE).render(messages) == CHAT_PROMPT
    strict = Template("{% if messages[0].role != 'user' %}{{ raise_exception('start with a user') }}{% endif %}"
                      "{{ bos_token }}{{ messages[0].content }}", bos_token="<s>")  # fmt: skip
    with pytest.raises(ChatError, match="refuses this conversation: start with a user"):
        strict.render(messages)
    assert strict.render(messages[1:]) == "<s>takes bare GPU hosts"
    with pytest.raises(ChatError, match="no chat template"):
        Template("").render(messages)
    with pytest.raises(ValueError, match="does not compile"):
        Template("{% for %}")
    sandboxed = Template("{{ ''.__class__.__mro__ }}")
    with pytest.raises(ChatError, match="is unsafe"):  # the sandbox: no attributes that reach Python's internals
        sandboxed.render(messages)
    from ftgateway.app import Gateway  # noqa: PLC0415
    from ftgateway.config import Settings  # noqa: PLC0415

    with pytest.raises(ConfigError, match="chat_template"):
        Gateway(Settings(model="m", allow_anonymous=True, chat_template="{% if %}"), backend=None)


def test_echo_returns_the_prompt_then_the_completion(front):
    plain = front.complete(max_tokens=6, temperature=0)["choices"][0]["text"]
    echoed = front.complete(max_tokens=6, temperature=0, echo=True)
    assert echoed["choices"][0]["text"] == PROMPT + plain
    assert echoed["usage"]["completion_tokens"] == 6
    _, chunks = front.stream(max_tokens=6, temperature=0, echo=True)
    assert "".join(c["choices"][0]["text"] for c in chunks) == PROMPT + plain


def test_a_stop_sequence_ends_the_completion_early(front):
    whole = front.complete(max_tokens=20, temperature=0)["choices"][0]["text"]
    # The tokens the model generated (the stand-in's own greedy decoding; encoding the text again
    # may split it otherwise). Pick one, first of its kind, whose text encodes back to that one
    # token: the model matches stop words by tokens (" word" and "word" differ in byte-level BPE).
    tok, prompt_ids = front.tokenizer, front.tokenizer.encode(PROMPT)
    ids = load(front.shards).generate(prompt_ids, 20, end_id=tok.eos_token_id)
    assert PROMPT + whole == tok.decode(prompt_ids + ids)
    position, stop = next((i, tok.decode([t])) for i, t in enumerate(ids) if i >= 2 and ids.index(t) == i
                          and tok.encode(tok.decode([t])) == [t] and tok.decode([t]).strip().isalnum())  # fmt: skip
    answer = front.complete(max_tokens=20, temperature=0, stop=[stop])
    choice = answer["choices"][0]
    assert choice["text"] == whole[: whole.index(stop)]
    assert choice["finish_reason"] == "stop"
    # the model itself stopped (stop_words_list) right after the stop's token
    assert answer["usage"]["completion_tokens"] <= position + 1 < 20, (stop, position, answer["usage"])
    _, chunks = front.stream(max_tokens=20, temperature=0, stop=stop)
    assert "".join(c["choices"][0]["text"] for c in chunks) == choice["text"]


def test_bad_words_and_logit_bias_ban_what_the_model_would_say(front):
    """bad_words (vLLM's extra) and logit_bias -100 (OpenAI's ban) become FT's bad_words_list:
    the answer equals the stand-in's own decoding with that word banned, and differs from the
    plain one. The word is a token the plain answer has, first of its kind, whose text encodes back
    to that one token (bad words are matched by tokens, as stop words are)."""
    tok, prompt_ids, eos = front.tokenizer, front.tokenizer.encode(PROMPT), front.tokenizer.eos_token_id
    model = load(front.shards)
    plain = model.generate(prompt_ids, 20, end_id=eos)
    banned = next(t for i, t in enumerate(plain) if plain.index(t) == i and tok.encode(tok.decode([t])) == [t]
                  and tok.decode([t]).strip().isalnum())  # fmt: skip
    expected = model.generate(prompt_ids, 20, end_id=eos, bad=[[banned]])
    assert expected != plain
    assert banned not in expected
    word = tok.decode([banned])
    for asked in ({"bad_words": [word]}, {"bad_words": word}, {"logit_bias": {str(banned): -100, "7": 0}}):
        answer = front.complete(max_tokens=20, temperature=0, **asked)["choices"][0]["text"]
        assert PROMPT + answer == tok.decode(prompt_ids + expected), asked
    _, chunks = front.stream(max_tokens=20, temperature=0, bad_words=[word])
    assert PROMPT + "".join(c["choices"][0]["text"] for c in chunks) == tok.decode(prompt_ids + expected)
    # both at once: one list of the two kinds (text and ids)
    second = next(t for t in expected if t != banned and tok.encode(tok.decode([t])) == [t])
    both = model.generate(prompt_ids, 20, end_id=eos, bad=[[banned], [second]])
    answer = front.complete(max_tokens=20, temperature=0, bad_words=[word], logit_bias={str(second): -100})
    assert PROMPT + answer["choices"][0]["text"] == tok.decode(prompt_ids + both)
    # chat takes them too: the chat answer is the completion of its rendered prompt with the same ban
    chat = front.post("/v1/chat/completions", {"model": MODEL, "messages": CHAT, "max_tokens": 12, "temperature": 0,
                                               "logit_bias": {str(banned): -100}})  # fmt: skip
    assert chat.status_code == 200, chat.text
    same = front.complete(prompt=CHAT_PROMPT, max_tokens=12, temperature=0, logit_bias={str(banned): -100})
    assert chat.json()["choices"][0]["message"]["content"] == same["choices"][0]["text"]


def test_keys_are_required_and_rate_limited(front):
    models = httpx.get(front.url + "/v1/models", timeout=10)
    assert models.status_code == 401
    assert models.json()["error"]["code"] == "missing_api_key"
    wrong = front.post("/v1/completions", {"model": MODEL, "prompt": "x"}, key="ftf-not-a-key")
    assert wrong.status_code == 401
    assert wrong.json()["error"]["type"] == "authentication_error"
    listed = httpx.get(front.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert [m["id"] for m in listed.json()["data"]] == [MODEL]
    assert httpx.get(front.url + "/healthz", timeout=10).json()["status"] == "ready"  # no key needed
    assert httpx.get(front.url + "/health", timeout=10).json()["status"] == "ready"  # vLLM's name (GuideLLM asks it)
    answers = [front.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1}, key=SLOW_KEY)
               for _ in range(4)]  # fmt: skip
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert int(answers[-1].headers["retry-after"]) >= 1
    assert answers[-1].json()["error"]["code"] == "rate_limit_exceeded"


@pytest.mark.parametrize(
    ("body", "status", "param", "words"),
    [
        ("{not json", 400, None, "not valid JSON"),
        (b'{"model": "tiny", "prompt": "\xff\xfe"}', 400, None, "not valid JSON (not UTF-8, or nested too deep)"),
        ("[" * 2000 + "]" * 2000, 400, None, "not valid JSON (not UTF-8, or nested too deep)"),
        ({"model": "gpt-4", "prompt": "x"}, 404, "model", "does not exist here"),
        ({"model": MODEL, "prompt": "word " * 200}, 400, "prompt", "context of 128"),
        ({"model": MODEL, "prompt": "x", "max_tokens": 65}, 400, "max_tokens", "limit of 64"),
        ({"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens", "greater than or equal to 1"),
        ({"model": MODEL, "prompt": "x", "temperature": -0.5}, 400, "temperature", "greater than or equal to 0"),
        ({"model": MODEL, "prompt": "x", "max_tokens": "ten"}, 400, "max_tokens", "integer"),
        ({"model": MODEL, "prompt": 42}, 400, "prompt", "string"),
        ({"model": MODEL, "prompt": ["a"] * 17}, 400, "prompt", "at most 16"),
        ({"model": MODEL, "prompt": ["a", ""]}, 400, "prompt", "prompt 1 of the list is empty"),
        ({"model": MODEL, "prompt": ["a", "word " * 200]}, 400, "prompt", "context of 128"),
        ({"model": MODEL, "prompt": ""}, 400, "prompt", "empty"),
        ({"model": MODEL, "prompt": "x", "n": 2}, 400, "best_of", "needs temperature 0"),
        ({"model": MODEL, "prompt": "x", "n": 3, "best_of": 2, "temperature": 0}, 400, "n", "at most best_of"),
        ({"model": MODEL, "prompt": "x", "best_of": 2, "temperature": 0, "stream": True}, 400, "best_of", "streaming"),
        ({"model": MODEL, "prompt": "x", "logprobs": 2, "temperature": 0}, 400, "logprobs", "chosen token's"),
        ({"model": MODEL, "prompt": "x", "logprobs": 1, "temperature": 0.5}, 400, "logprobs", "greedy"),
        ({"model": MODEL, "prompt": "x", "logprobs": 6}, 400, "logprobs", "between 0 and 5"),
        (
            {"model": MODEL, "prompt": "x", "stream_options": {"include_usage": True}},
            400,
            "stream_options",
            "only allowed with stream true",
        ),
        (
            {"model": MODEL, "prompt": "x", "stream": True, "stream_options": {"include_obfuscation": True}},
            400,
            "stream_options",
            "only include_usage",
        ),
        ({"model": MODEL, "prompt": "x", "logprobs": 0, "stream": True}, 400, "logprobs", "stream false"),
        ({"model": MODEL, "prompt": "x", "logprobs": 0, "echo": True}, 400, "logprobs", "prompt's tokens"),
        ({"model": MODEL, "prompt": "x", "repetition_penalty": 0}, 400, "repetition_penalty", "above 0"),
        ({"model": MODEL, "prompt": "x", "length_penalty": 1.0}, 400, "length_penalty", "best_of"),
        (
            {"model": MODEL, "prompt": "x", "length_penalty": 11, "best_of": 2, "temperature": 0},
            400,
            "length_penalty",
            "less than or equal to 10",
        ),
        ({"model": MODEL, "prompt": "x", "presence_penalty": 2.5}, 400, "presence_penalty", "at most 2"),
        ({"model": MODEL, "prompt": "x", "stop": ["a,b"]}, 400, "stop", "comma"),
        ({"model": MODEL, "prompt": "x", "bad_words": ["a,b"]}, 400, "bad_words", "comma"),
        ({"model": MODEL, "prompt": "x", "bad_words": [""]}, 400, "bad_words", "must not be empty"),
        ({"model": MODEL, "prompt": "x", "bad_words": ["w"] * 65}, 400, "bad_words", "at most 64"),
        ({"model": MODEL, "prompt": "x", "logit_bias": {"50": 5}}, 400, "logit_bias", "can only ban"),
        ({"model": MODEL, "prompt": "x", "logit_bias": {"a": -100}}, 400, "logit_bias", "not a token id"),
        (
            {"model": MODEL, "prompt": "x", "logit_bias": {"99999999": -100}},
            400,
            "logit_bias",
            "token id 99999999 is past the model's vocabulary of",
        ),
        ({"model": MODEL, "prompt": "x", "logit_bias": {"5": -101}}, 400, "logit_bias", "outside -100..100"),
        ({"model": MODEL, "prompt": "x", "temperature": 0.5, "top_k": 0, "top_p": 0}, 400, "top_p", "greedy"),
        ({"model": MODEL, "prompt": "x", "frobnicate": True}, 400, "frobnicate", "unknown parameter"),
        ({"model": MODEL, "prompt": "x" * 5000}, 413, None, "over 4096 bytes"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None,
)
def test_bad_requests_get_an_openai_error_and_the_service_keeps_serving(front, body, status, param, words):
    if isinstance(body, (str, bytes)):
        answer = httpx.post(front.url + "/v1/completions", content=body, timeout=30,
                            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})  # fmt: skip
    else:
        answer = front.post("/v1/completions", body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert words in error["message"], error
    assert front.complete(max_tokens=1, temperature=0)["usage"]["completion_tokens"] == 1


def test_a_chunked_body_is_held_to_the_same_limit(front):
    """A body sent without Content-Length (chunked) is read within the limit, then served or refused."""

    def chunks(body: dict):
        data = json.dumps(body).encode()
        yield from (data[i : i + 1000] for i in range(0, len(data), 1000))

    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    url = front.url + "/v1/completions"
    small = {"model": MODEL, "prompt": "x", "max_tokens": 1, "temperature": 0, "user": "u" * 3000}  # 4 chunks
    answer = httpx.post(url, content=chunks(small), headers=headers, timeout=30)
    assert "content-length" not in answer.request.headers
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 1
    answer = httpx.post(url, content=chunks({**small, "prompt": "x" * 5000}), headers=headers, timeout=30)
    assert answer.status_code == 413
    assert "over 4096 bytes" in answer.json()["error"]["message"]


def test_metrics_count_requests_tokens_and_errors(front):
    front.complete(max_tokens=3, temperature=0)
    front.stream(max_tokens=3, temperature=0)
    text = httpx.get(front.url + "/metrics", timeout=10).text
    lines = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if line and not line.startswith("#")}  # fmt: skip
    assert lines['ftgateway_requests_total{route="/v1/completions",status="200"}'] >= 2
    assert lines['ftgateway_tokens_total{direction="out"}'] >= 6
    assert lines["ftgateway_time_to_first_token_seconds_count"] >= 1
    assert lines['ftgateway_request_seconds_count{route="/v1/completions"}'] >= 2


def test_token_counters_start_at_zero_before_any_request():
    """rate() needs a sample before a burst: a series born with the burst in it reads 0 tokens per second."""
    text = generate_latest(Metrics().registry).decode()
    assert 'ftgateway_tokens_total{direction="in"} 0.0' in text
    assert 'ftgateway_tokens_total{direction="out"} 0.0' in text


def test_a_revoked_key_is_refused_without_a_restart(front, tmp_path):
    saved = front.keys_file.read_text()
    try:
        front.keys_file.write_text(json.dumps({"keys": [{"name": "slow", "sha256": hash_key(SLOW_KEY)}]}))
        os.utime(front.keys_file, ns=(time.time_ns(), time.time_ns() + 10**9))
        assert front.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1}).status_code == 401
    finally:
        front.keys_file.write_text(saved)
        os.utime(front.keys_file, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert front.complete(max_tokens=1)["usage"]["completion_tokens"] == 1


def test_a_key_scoped_to_other_models_or_expired_is_refused_by_name(front):
    saved = front.keys_file.read_text()
    soon = time.time() + 3
    until = datetime.datetime.fromtimestamp(soon, datetime.UTC).isoformat()
    try:
        front.keys_file.write_text(
            json.dumps(
                {
                    "keys": [
                        {"name": "elsewhere", "sha256": hash_key(KEY), "models": ["llama", "kogpt"]},
                        {"name": "brief", "sha256": hash_key(SLOW_KEY), "models": [MODEL, "llama"], "expires": until},
                    ]
                }
            )
        )
        os.utime(front.keys_file, ns=(time.time_ns(), time.time_ns() + 10**9))
        body = {"model": MODEL, "prompt": "x", "max_tokens": 1}
        scoped = front.post("/v1/completions", body)
        assert scoped.status_code == 403, scoped.text
        assert scoped.json()["error"] == {
            "message": f"the API key 'elsewhere' may not use the model {MODEL!r}",
            "type": "permission_error",
            "param": None,
            "code": "model_not_allowed",
        }
        assert front.post("/v1/completions", body, key=SLOW_KEY).status_code == 200  # in scope, not yet expired
        time.sleep(max(0.0, soon - time.time()) + 0.1)
        expired = front.post("/v1/completions", body, key=SLOW_KEY)
        assert expired.status_code == 401, expired.text
        assert expired.json()["error"]["code"] == "expired_api_key"
        assert f"the API key 'brief' expired at {until}" == expired.json()["error"]["message"]
    finally:
        front.keys_file.write_text(saved)
        os.utime(front.keys_file, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert front.complete(max_tokens=1)["usage"]["completion_tokens"] == 1


def test_the_gateway_tokenizes_itself_where_its_tokenizer_equals_the_models(front):
    front.complete(max_tokens=2)
    metrics = httpx.get(front.url + "/metrics", timeout=10).text
    assert f"ftgateway_local_tokenizer {1.0 if front.decoupled else 0.0}" in metrics
    # the local tokenizer is the checkpoint's, as transformers' AutoTokenizer reads it
    from ftgateway.tokens import PROBES, LocalTokenizer  # noqa: PLC0415

    local, why = LocalTokenizer.load(str(front.checkpoint))
    assert local is not None, why
    corpus = (ROOT / "tests" / "fixtures" / "tokenizer-corpus" / "README.md").read_text()[:4000]
    for text in (*PROBES, corpus, PROMPT):
        ids = front.tokenizer.encode(text)
        assert local.encode(text) == ids
        assert local.decode(ids) == front.tokenizer.decode(ids)


@pytest.mark.parametrize(
    ("change", "reason"),
    [({"normalizer": {"type": "Lowercase"}}, "tokens of"), ({"decoder": None}, "decoding")],
    ids=["tokens", "decoding"],
)
def test_a_tokenizer_unlike_the_models_is_not_used(front, tmp_path, change, reason):
    """A tokenizer.json that tokenizes or decodes otherwise than the models: the gateway finds it
    out on the probes and keeps calling the models."""
    import asyncio  # noqa: PLC0415

    from ftgateway.tokenizing import Tokenizing  # noqa: PLC0415
    from ftgateway.triton import Triton  # noqa: PLC0415

    if front.decoupled:
        pytest.skip("one tritonserver is enough")
    spec = json.loads((front.checkpoint / "tokenizer.json").read_text())
    (tmp_path / "tokenizer.json").write_text(json.dumps({**spec, **change}))

    async def verdict():
        backend = Tokenizing(Triton(front.triton_grpc, 10), str(tmp_path))
        try:
            tokens = await backend.tokenize(PROMPT, [], 4)
            return await backend.use_local(), backend.reason, tokens.ids.reshape(-1).tolist()
        finally:
            await backend.close()

    used, why, ids = asyncio.run(verdict())
    assert not used
    assert why.startswith(reason), why
    assert ids == front.tokenizer.encode(PROMPT)  # from the preprocessing model, as without it


def test_a_revision_checked_out_under_a_running_gateway_is_followed(front, tmp_path):
    """The checkpoint's files change under a running gateway (a rollback checks out the previous
    revision and keeps the gateway running): its next request reads the special tokens again and
    verifies its tokenizer again, without a restart. Here generation_config.json comes to name a
    token of the answer as its pad token: that token's text leaves the answer."""
    if not front.decoupled:
        pytest.skip("one tritonserver is enough")
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(front.checkpoint, checkpoint)
    settings = {"model": MODEL, "triton_grpc": front.triton_grpc, "context_length": 128, "max_tokens_limit": 64,
                "keys_file": str(front.keys_file), "tokenizer_dir": str(checkpoint),
                "checkpoint_dir": str(checkpoint)}  # fmt: skip
    proc, url = _gateway(settings, tmp_path)
    try:
        body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 12, "temperature": 0}
        ask = lambda: httpx.post(url + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"}, json=body,  # noqa: E731
                                 timeout=60)  # fmt: skip
        before = ask().json()["choices"][0]["text"]
        tok, prompt_ids = front.tokenizer, front.tokenizer.encode(PROMPT)
        new = load(front.shards).generate(prompt_ids, 12, end_id=tok.eos_token_id)
        assert PROMPT + before == tok.decode(prompt_ids + new)
        hidden = next(t for t in new if tok.decode([t]).strip())
        (checkpoint / "generation_config.json").write_text(json.dumps({"pad_token_id": hidden}))
        after = ask().json()["choices"][0]["text"]
        assert PROMPT + after == tok.decode(prompt_ids + [t for t in new if t != hidden])
        assert after != before
        assert httpx.get(url + "/healthz", timeout=30).status_code == 200
        assert "files changed" in (tmp_path / next(f.name for f in tmp_path.glob("gateway-*.log"))).read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _metric(front: Front, line_start: str) -> float:
    for line in httpx.get(front.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return 0.0


def test_a_client_that_leaves_mid_stream_stops_the_gateways_work(front):
    """The client closes its connection after the first chunk: the gateway cancels the stream at
    once (counted as a disconnect and a 499), decodes and sends nothing more, and serves on."""
    import socket  # noqa: PLC0415
    from urllib.parse import urlsplit  # noqa: PLC0415

    if not front.decoupled:
        pytest.skip("a buffered stream sends its one chunk at the end")
    before = _metric(front, "ftgateway_client_disconnects_total")
    address = urlsplit(front.url)
    body = json.dumps({"model": MODEL, "prompt": PROMPT, "max_tokens": 64, "temperature": 0, "stream": True})
    request = (f"POST /v1/completions HTTP/1.1\r\nHost: {address.netloc}\r\nAuthorization: Bearer {KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}")  # fmt: skip
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(request.encode())
        seen = b""
        while b"data: {" not in seen:
            got = sock.recv(256)
            assert got, f"the gateway closed the stream before its first chunk: {seen!r}"
            seen += got
    deadline = time.monotonic() + 5
    while _metric(front, "ftgateway_client_disconnects_total") < before + 1:
        assert time.monotonic() < deadline, "the gateway did not notice the client leaving"
        time.sleep(0.05)
    assert _metric(front, 'ftgateway_requests_total{route="/v1/completions",status="499"}') >= 1
    assert front.complete(max_tokens=2)["usage"]["completion_tokens"] == 2


def test_a_stream_that_tritonserver_drops_is_a_retryable_upstream_error():
    """Killed mid-stream, tritonserver's gRPC stream ends in grpc's own error (not tritonclient's):
    it must reach the routes as InferenceServerException UNAVAILABLE (a 503 HAProxy retries),
    not as an unhandled 500."""
    import asyncio  # noqa: PLC0415

    import grpc  # noqa: PLC0415
    from tritonclient.utils import InferenceServerException  # noqa: PLC0415

    from ftgateway.errors import triton_error  # noqa: PLC0415
    from ftgateway.triton import Triton  # noqa: PLC0415

    class Dropped:
        async def stream_infer(self, requests, stream_timeout=None):
            yield await anext(aiter(_drop()))

    async def _drop():
        raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   details="Stream removed (Socket closed)")  # fmt: skip
        yield  # an async generator

    triton = Triton("127.0.0.1:1", 5)
    triton._client, triton._decoupled = Dropped(), True

    async def first():
        return await anext(aiter(triton._answers([], 8)))

    with pytest.raises(InferenceServerException) as err:
        asyncio.run(first())
    assert str(err.value.status()) == "StatusCode.UNAVAILABLE"
    assert triton._decoupled is None  # forgotten: read again from the restarted server
    answer = triton_error(err.value)
    assert (answer.status, answer.code) == (503, "upstream_down")


def test_a_server_unloading_its_models_is_retryable_and_other_errors_are_not():
    """A tritonserver that is stopping unloads the models first: the ensemble answers that its step
    has no available versions (nothing generated), which HAProxy may retry elsewhere (503); an
    error about the request itself stays a 502."""
    from tritonclient.utils import InferenceServerException  # noqa: PLC0415

    from ftgateway.errors import triton_error  # noqa: PLC0415

    unloading = InferenceServerException("Request for unknown model: 'fastertransformer' has no available versions",
                                         status="StatusCode.INTERNAL")  # fmt: skip
    assert (triton_error(unloading).status, triton_error(unloading).code) == (503, "upstream_down")
    wrong = InferenceServerException("unexpected shape for input 'input_ids'", status="StatusCode.INVALID_ARGUMENT")
    assert (triton_error(wrong).status, triton_error(wrong).code) == (502, "upstream_error")


def test_without_tritonserver_health_says_so_and_requests_get_a_server_error(tmp_path):
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"name": "one", "sha256": hash_key(KEY)}]}))
    proc, url = _gateway({"model": MODEL, "triton_grpc": f"127.0.0.1:{free_port()}", "keys_file": str(keys),
                          "request_timeout_s": 5}, tmp_path)  # fmt: skip
    try:
        health = httpx.get(url + "/healthz", timeout=30)
        assert health.status_code == 503
        assert health.json()["status"] == "not ready"
        answer = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x"}, timeout=30,
                            headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
        # Retryable: HAProxy sends it to another host (retry-on 503) and marks this one down.
        assert (answer.status_code, answer.headers.get("retry-after")) == (503, "1"), answer.text
        assert answer.json()["error"]["type"] == "server_error"
        assert answer.json()["error"]["code"] == "upstream_down"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_with_a_certificate_the_gateway_serves_https_only(tmp_path):
    cert, key = tmp_path / "gw.pem", tmp_path / "gw.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)  # fmt: skip
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"name": "one", "sha256": hash_key(KEY)}]}))
    settings = {"model": MODEL, "triton_grpc": f"127.0.0.1:{free_port()}", "keys_file": str(keys)}
    proc, url = _gateway(settings, tmp_path, str(cert), str(key))
    try:
        assert url.startswith("https://")
        listed = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}, verify=str(cert), timeout=10)
        assert listed.json()["data"][0]["id"] == MODEL  # over TLS, verified against the certificate
        with pytest.raises(httpx.TransportError):
            httpx.get(url.replace("https://", "http://") + "/v1/models", timeout=5)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_bad_settings_file_is_refused_at_start(tmp_path):
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"model": MODEL, "keys_file": "", "context_lenght": 5}))
    done = subprocess.run([str(BIN / "python"), "-m", "ftgateway", "--config", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "unknown setting(s) ['context_lenght']" in done.stderr


@pytest.mark.parametrize(
    ("openai", "ft"),
    [
        ((0.0, 0, 1.0, None), (1, 0.0, 1.0, 0)),  # temperature 0: FT's greedy path
        ((0.0, 40, 0.5, 7), (1, 0.0, 1.0, 7)),  # greedy ignores top_k/top_p
        ((0.8, 0, 1.0, 5), (0, 1.0, 0.8, 5)),  # plain sampling at a temperature
        ((1.0, 40, 1.0, None), (40, 1.0, 1.0, 99)),  # top-k; no seed given: the fresh one
        ((1.0, 0, 0.9, 3), (0, 0.9, 1.0, 3)),  # nucleus
    ],
)
def test_sampling_maps_openai_parameters_to_fts(openai, ft):
    from ftgateway.sampling import sampling  # noqa: PLC0415

    temperature, top_k, top_p, seed = openai
    got = sampling(temperature, top_k, top_p, seed, fallback_seed=99)
    assert (got.runtime_top_k, got.runtime_top_p, got.temperature, got.random_seed) == ft


def test_greedy_with_log_probs_takes_fts_top_p_path():
    """FT's top-k path reports log P(token | top-1) = 0 for greedy decoding; the top-p path with a
    tiny top_p takes the same most likely token with its full log probability."""
    from ftgateway.sampling import GREEDY_TOP_P, sampling  # noqa: PLC0415

    got = sampling(0.0, 40, 0.5, None, fallback_seed=9, log_probs=True)
    assert (got.runtime_top_k, got.runtime_top_p, got.temperature, got.random_seed, got.log_probs) == (
        0, GREEDY_TOP_P, 1.0, 0, True)  # fmt: skip
    assert GREEDY_TOP_P <= 1 / 1_000_000  # under 1 / vocabulary for any vocabulary under a million
    assert sampling(0.7, 0, 1.0, 3, fallback_seed=9, log_probs=True).runtime_top_p == 1.0


@pytest.mark.parametrize(
    ("openai", "param"),
    [((2.5, 0, 1.0, None), "temperature"), ((1.0, -1, 1.0, None), "top_k"), ((1.0, 0, 1.5, None), "top_p"),
     ((1.0, 0, 0.0, None), "top_p"), ((1.0, 0, 1.0, 2**64), "seed")],
)  # fmt: skip
def test_sampling_that_ft_cannot_honour_is_refused(openai, param):
    from ftgateway.sampling import SamplingError, sampling  # noqa: PLC0415

    with pytest.raises(SamplingError) as err:
        sampling(*openai, fallback_seed=1)
    assert err.value.param == param


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"model": ""}, "'model' must be a non-empty string"),
     ({"model": "m", "keys_file": "/k", "context_length": 0}, "'context_length' must be a positive integer"),
     ({"model": "m", "keys_file": "/k", "max_tokens_limit": 2048}, "must be smaller than 'context_length'"),
     ({"model": "m", "keys_file": "/k", "max_best_of": 17}, r"'max_best_of' must be a whole number from 1 to 16"),
     ({"model": "m", "keys_file": "/k", "max_best_of": 0}, r"'max_best_of' must be a whole number from 1 to 16"),
     ({"model": "m"}, "no 'keys_file'")],
)  # fmt: skip
def test_settings_refuse_what_the_gateway_cannot_start_with(settings, message):
    from ftgateway.config import ConfigError, Settings  # noqa: PLC0415

    with pytest.raises(ConfigError, match=message):
        Settings.from_dict(settings)


@pytest.mark.parametrize(
    ("record", "message"),
    [({"models": "kogpt"}, r"\(k\): 'models' must be a list of model names"),
     ({"expires": "2027-01-31T00:00"}, r"\(k\): 'expires' must be ISO 8601 with a time zone"),
     ({"expires": "next week"}, r"'expires' must be ISO 8601"), ({"expires": 1700000000}, r"'expires' must be")],
)  # fmt: skip
def test_a_key_file_with_a_bad_scope_or_expiry_is_refused(record, message):
    from ftgateway.config import ConfigError, parse_keys  # noqa: PLC0415

    with pytest.raises(ConfigError, match=message):
        parse_keys(json.dumps({"keys": [{"name": "k", "sha256": hash_key(KEY), **record}]}), 600)
    good = parse_keys(json.dumps({"keys": [{"name": "k", "sha256": hash_key(KEY), "models": ["m"],
                                            "expires": "2027-01-31T00:00:00+00:00"}]}), 600)  # fmt: skip
    assert good[hash_key(KEY)].expires == datetime.datetime(2027, 1, 31, tzinfo=datetime.UTC).timestamp()
    assert good[hash_key(KEY)].refusal("m", 0) is None


@pytest.mark.parametrize(
    "requirements", ["roles/gateway/files/requirements.txt", "roles/ft_convert/files/registry-requirements.txt"]
)
def test_the_hosts_packages_are_pinned_from_their_lists(requirements):
    """What roles install on hosts: every line an exact pin, every top-level package of the .in
    list among them, the file as scripts/lock-host-requirements writes it. (That the pins install
    and run on every host Python: tests/test_host_pythons.py.)"""
    name = lambda line: line.split("==")[0].split("[")[0].split(";")[0].strip().lower().replace("_", "-")  # noqa: E731
    text = (ROOT / requirements).read_text()
    assert "# Generated by scripts/lock-host-requirements" in text
    pins = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][^ ;]*( ; python_version < \"3\.\d+\")?", p) for p in pins), pins
    source = (ROOT / requirements).with_suffix(".in").read_text().splitlines()
    tops = {name(line) for line in source if line and not line.startswith("#")}
    assert tops <= {name(p) for p in pins}


def test_a_tritonserver_restarted_with_another_revision_is_named_by_the_next_answer(tmp_path):
    """A rollout restarts tritonserver behind a drained gateway: no health check sees it down and no
    call fails (the gRPC channel connects again), yet the repository it loads is another revision's.
    The channel's lost connection makes the gateway read the model's config again."""
    checkpoint = tmp_path / "checkpoint"
    tiny_model("gpt", checkpoint)
    repo = gpt_repository(tmp_path, checkpoint, tp=1, decoupled=False, revision=REVISION)
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps({"keys": [{"name": "one", "sha256": hash_key(KEY)}]}))
    with tritonserver(repo, tmp_path) as server:
        ports = server
        settings = {"model": MODEL, "triton_grpc": f"127.0.0.1:{server.grpc}", "keys_file": str(keys_file)}
        proc, url = _gateway(settings, tmp_path)
        try:
            asked = {"model": MODEL, "prompt": PROMPT, "max_tokens": 2, "temperature": 0}
            headers = {"Authorization": f"Bearer {KEY}"}
            first = httpx.post(url + "/v1/completions", json=asked, headers=headers, timeout=60)
            assert first.json()["system_fingerprint"] == "fp_" + REVISION[:12]
            server.process.terminate()
            server.process.wait(timeout=30)
            config = repo / "fastertransformer" / "config.pbtxt"
            config.write_text(config.read_text().replace(REVISION, NEXT_REVISION))
            with tritonserver(repo, tmp_path, ports=ports):
                second = httpx.post(url + "/v1/completions", json=asked, headers=headers, timeout=60)
            assert second.status_code == 200, second.text
            assert second.json()["system_fingerprint"] == "fp_" + NEXT_REVISION[:12]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
