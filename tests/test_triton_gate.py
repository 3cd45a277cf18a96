"""roles/triton_server's gate (tasks_from gate) against a real tritonserver serving the lab's model
as triton_model_repo writes its repository (tp 1, the CPU stand-in as fastertransformer): the
smoke inference goes through the ensemble's infer endpoint, or, for a decoupled model, through
Triton's generate_stream, whose last event must carry the answer; a stream that ends in an error
event fails the host with what the server said."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ENTRY_PLAY, ROOT, run_playbook
from tritonlocal import gpt_repository, tritonserver

pytest.importorskip("pytriton")
transformers = pytest.importorskip("transformers")

LAB_MODEL = ROOT / "lab" / "models" / "tiny-gpt2"
PROMPT, TOKENS = "Every role", 8


def gate(tmp_path, server, *, decoupled: bool, tokens: int = TOKENS):
    """The gate's play on localhost against `server`: (its return code, its output)."""
    play = tmp_path / "gate.yml"
    play.write_text(ENTRY_PLAY.format(play_vars=json.dumps({}), role="triton_server", entry="gate",
                                      published="__triton_server_decoupled"))  # fmt: skip
    extra = tmp_path / "gate-extra.json"
    extra.write_text(json.dumps({
        "__triton_server_url": f"http://127.0.0.1:{server.http}", "triton_model_repo_decoupled": decoupled,
        "triton_server_model_name": "lab", "triton_server_smoke_prompt": PROMPT,
        "triton_server_smoke_output_len": tokens, "triton_server_ready_timeout": 30, "triton_server_log_lines": 5,
        "entry_out": str(tmp_path / "gate.json"), "ansible_python_interpreter": "/usr/bin/python3",
    }))  # fmt: skip
    done = run_playbook(play, "-i", "localhost,", "-e", f"@{extra}")
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module", params=[False, True], ids=["whole", "decoupled"])
def served(request, tmp_path_factory):
    work = tmp_path_factory.mktemp("gate")
    checkpoint = work / "checkpoint"
    shutil.copytree(LAB_MODEL, checkpoint)
    repo = gpt_repository(work, checkpoint, tp=1, decoupled=request.param, name="lab")
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=TOKENS, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    with tritonserver(repo, work) as server:
        yield server, request.param, tokenizer.decode(out[0])


def test_the_gate_answers_through_the_ensemble_whole_or_streamed(served, tmp_path):
    server, decoupled, greedy = served
    code, said = gate(tmp_path, server, decoupled=decoupled)
    assert code == 0, said
    # the success message names the answer: the ensemble's text (prompt included), as transformers
    assert f"answers {json.dumps(PROMPT)} with {json.dumps(greedy)}" in said, said
    assert (" events" in said) == decoupled, said


def test_a_stream_that_ends_in_an_error_fails_the_gate(served, tmp_path):
    server, decoupled, _greedy = served
    if not decoupled:
        pytest.skip("the whole answer's refusal is an HTTP error, which the uri task already fails on")
    # request_output_len 0: the stand-in refuses it, and generate_stream says so in an error event
    code, said = gate(tmp_path, server, decoupled=True, tokens=0)
    assert code != 0, said
    assert "failed its gate" in said, said
    assert "streamed smoke inference answered" in said, said
