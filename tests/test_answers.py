"""What clients get when the model ends at its end token, as OpenAI-compatible servers answer
(vLLM's and TGI's skip_special_tokens by default): no completion or chat content, whole or
streamed, carries the end token's text; finish_reason and usage stay right; the Triton ensemble's
own output stays as upstream's (the end token's text included).

The lab's shipped model (lab/models/tiny-gpt2) ends "Every role" with <|endoftext|> after about
64 tokens (transformers' generate() agrees); it is served by a real tritonserver (decoupled, tp 1,
the CPU stand-in), with one gateway that tokenizes itself and one that calls the models."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

import pytest
from conftest import ROOT
from tritonlocal import gpt_repository, start_gateway, tritonserver

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
httpx = pytest.importorskip("httpx")
pytest.importorskip("pytriton")

LAB_MODEL = ROOT / "lab" / "models" / "tiny-gpt2"
PROMPT, MAX = "Every role", 120
END = "<|endoftext|>"


@pytest.fixture(scope="module")
def fronts(tmp_path_factory):
    work = tmp_path_factory.mktemp("answers")
    checkpoint = work / "checkpoint"
    shutil.copytree(LAB_MODEL, checkpoint)
    repo = gpt_repository(work, checkpoint, tp=1, decoupled=True, name="lab")
    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    with tritonserver(repo, work) as server:
        procs, urls = [], {}
        for mode, tokenizer_dir in (("local", str(checkpoint)), ("models", "")):
            settings = {"model": "lab", "triton_grpc": f"127.0.0.1:{server.grpc}", "context_length": 256,
                        "max_tokens_limit": 128, "allow_anonymous": True, "chat_template": template,
                        "tokenizer_dir": tokenizer_dir, "checkpoint_dir": str(checkpoint)}  # fmt: skip
            proc, url, _log = start_gateway(settings, work)
            procs.append(proc)
            urls[mode] = url
        try:
            yield {"urls": urls, "http": server.http, "checkpoint": checkpoint}
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)


@pytest.fixture(scope="module")
def expected(fronts):
    """transformers' greedy answer: the new ids (the end token last) and their text without it."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(fronts["checkpoint"])
    model = transformers.AutoModelForCausalLM.from_pretrained(fronts["checkpoint"]).eval()
    ids = tokenizer.encode(PROMPT)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=MAX, do_sample=False,
                             pad_token_id=tokenizer.eos_token_id)[0].tolist()[len(ids) :]  # fmt: skip
    assert out[-1] == tokenizer.eos_token_id, "the lab's model should end this prompt at its end token"
    assert len(out) < MAX
    return {"tokens": len(out), "text": tokenizer.decode(out, skip_special_tokens=True), "prompt_tokens": len(ids)}


@pytest.mark.parametrize("mode", ["local", "models"])
def test_an_answer_that_ends_at_the_end_token_carries_no_special_text(fronts, expected, mode):
    url, body = fronts["urls"][mode], {"model": "lab", "prompt": PROMPT, "max_tokens": MAX, "temperature": 0}
    whole = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
    choice = whole["choices"][0]
    assert END not in choice["text"]
    assert choice["text"] == expected["text"]
    assert choice["finish_reason"] == "stop"
    assert whole["usage"]["completion_tokens"] == expected["tokens"]  # the end token is generated: counted
    assert whole["usage"]["prompt_tokens"] == expected["prompt_tokens"]

    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=60) as answer:
        events = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: {")]
    streamed = "".join(e["choices"][0]["text"] for e in events)
    assert streamed == expected["text"]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"

    scored = httpx.post(url + "/v1/completions", json={**body, "logprobs": 0}, timeout=60).json()["choices"][0]
    assert END not in "".join(scored["logprobs"]["tokens"])
    assert "".join(scored["logprobs"]["tokens"]) == expected["text"]

    chat = {"model": "lab", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX, "temperature": 0}
    answer = httpx.post(url + "/v1/chat/completions", json=chat, timeout=60).json()["choices"][0]
    assert answer["message"]["content"] == expected["text"]
    assert answer["finish_reason"] == "stop"
    with httpx.stream("POST", url + "/v1/chat/completions", json={**chat, "stream": True}, timeout=60) as stream:
        deltas = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: {")]
    assert "".join(d["choices"][0]["delta"].get("content", "") for d in deltas if d["choices"]) == expected["text"]


def test_the_ensembles_own_output_stays_as_upstreams(fronts, expected):
    """Upstream's postprocessing decodes with the special tokens: the ensemble keeps doing so."""
    body = {"INPUT_0": PROMPT, "INPUT_1": MAX, "INPUT_2": "", "INPUT_3": ""}  # Triton's generate extension
    request = urllib.request.Request(f"http://127.0.0.1:{fronts['http']}/v2/models/ensemble/generate_stream",
                                     data=json.dumps(body).encode(), method="POST")  # fmt: skip
    try:
        lines = urllib.request.urlopen(request, timeout=60).read().decode().splitlines()
    except urllib.error.HTTPError as err:
        raise AssertionError(f"{err}: {err.read().decode()}") from err
    text = "".join(json.loads(line[6:])["OUTPUT_0"] for line in lines if line.startswith("data: "))
    assert text.endswith(END)
    assert expected["text"] in text
