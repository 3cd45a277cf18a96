"""triton_model_repo: every config.pbtxt it writes parses with Triton's own schema, for every
family, and a whole repository loads in a real tritonserver (the one in the nvidia-pytriton
wheel) and answers through the ensemble, with the CPU stand-in (ftnative/triton_model.py) in
place of the FT backend library, which cannot be built here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT, run_playbook
from guideclients import ft_request, infer, run_clients
from tritonlocal import server_errors, tiny_model, tritonserver

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pytriton = pytest.importorskip("pytriton")
model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
from google.protobuf import text_format  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "unit"))
from upstream_interface import UPSTREAM, expected_output  # noqa: E402

from ftnative.convert import convert  # noqa: E402

FAMILIES = {"gptj": "GPT-J", "gpt": "GPT", "gptneox": "GPT-NeoX", "llama": "Llama", "bloom": "GPT"}
PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: triton_model_repo
      vars:
        fleet_model:
          {{name: "{{{{ family }}}}", family: "{{{{ family }}}}", source: {{url: "file:///x", revision: main}}{model}}}
        triton_model_repo_dir: "{root}/{{{{ family }}}}"
        triton_model_repo_container_dir: "{container}"
        triton_model_repo_container_tokenizer_dir: "{tokenizer}"
      loop: {families}
      loop_control:
        loop_var: family
"""


def render(playbook, root: Path, families, *, container="/models", tokenizer="/tokenizer", model="", **extra):
    """Run the role for each family into root/<family>; `model` adds keys to fleet_model."""
    play = playbook(
        PLAY.format(root=root, container=container, tokenizer=tokenizer, families=json.dumps(families), model=model)
    )
    extra_file = root.parent / f"{root.name}-extra.json"
    extra_file.write_text(json.dumps({"fleet_tensor_para_size": 2, "ansible_python_interpreter": sys.executable,
                                      **extra}))  # fmt: skip
    result = run_playbook(play, "-i", "localhost,", "-e", f"@{extra_file}")
    return result.returncode, result.stdout + result.stderr


def parse(path: Path):
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def declared(config) -> dict:
    """A parsed config's interface in the terms of tests/unit/upstream_interface.py."""
    kind = model_config_pb2.DataType.Name
    return {
        "inputs": {i.name: (kind(i.data_type)[len("TYPE_"):], list(i.dims), i.optional,
                            i.HasField("reshape") and list(i.reshape.shape) == []) for i in config.input},
        "outputs": {o.name: (kind(o.data_type)[len("TYPE_"):], list(o.dims)) for o in config.output},
        "parameters": set(config.parameters),
    }  # fmt: skip


def interface_differences(family: str, model: str, config) -> list[str]:
    """What a client of upstream's model would miss or trip over in ours: every input, output and
    parameter upstream declares, with the same data type, dims, optional flag and scalar reshape;
    anything we add must be an optional input (a client of upstream never sends it)."""
    upstream, ours = UPSTREAM[family][model], declared(config)
    problems = []
    for name, *spec in upstream["inputs"]:
        if ours["inputs"].get(name) != tuple(spec):
            problems.append(f"{family}/{model} input {name}: upstream {tuple(spec)}, ours {ours['inputs'].get(name)}")
    for name, *spec in upstream["outputs"]:
        if ours["outputs"].get(name) != expected_output(family, name, spec):
            problems.append(
                f"{family}/{model} output {name}: upstream {tuple(spec)} (FT answers "
                f"{expected_output(family, name, spec)}), ours {ours['outputs'].get(name)}"
            )
    problems += [f"{family}/{model} lacks parameter {p}" for p in upstream["parameters"] if p not in ours["parameters"]]
    theirs = {name for name, *_ in upstream["inputs"]}
    added = {name: spec for name, spec in ours["inputs"].items() if name not in theirs}
    problems += [f"{family}/{model} adds a required input {name}" for name, spec in added.items() if not spec[2]]
    return problems


@pytest.fixture(scope="module")
def every_family(tmp_path_factory) -> Path:
    """The five families' repositories, rendered once for the module's interface tests."""
    root = tmp_path_factory.mktemp("interface")

    def write(text: str, name: str = "play.yml") -> Path:
        (root / name).write_text(text)
        return root / name

    rc, out = render(write, root / "repos", sorted(UPSTREAM))
    assert rc == 0, out
    return root / "repos"


@pytest.mark.parametrize("family", sorted(UPSTREAM))
def test_each_model_declares_upstreams_interface(every_family, family):
    """Clients written for fastertransformer_backend (its end-to-end and identity clients, the
    ensemble's users) work unchanged: every config.pbtxt of the family declares what upstream's
    does. The facts come from upstream's files (tests/unit/upstream_interface.py), not from the
    filter the templates render."""
    problems = []
    for model in ("preprocessing", "fastertransformer", "postprocessing", "ensemble"):
        problems += interface_differences(family, model, parse(every_family / family / model / "config.pbtxt"))
    assert problems == []


def test_a_missing_input_is_caught_by_the_comparison(every_family, tmp_path):
    """The comparison has teeth: a config without one of upstream's inputs, or with another dims,
    is reported."""
    path = tmp_path / "config.pbtxt"
    text = (every_family / "gptneox" / "fastertransformer" / "config.pbtxt").read_text()
    broken = "\n".join(line for line in text.splitlines() if "beam_search_diversity_rate" not in line)
    broken = broken.replace('name: "bad_words_list" data_type: TYPE_INT32 dims: [ 2, -1 ]',
                            'name: "bad_words_list" data_type: TYPE_INT32 dims: [ -1 ]')  # fmt: skip
    path.write_text(broken)
    problems = interface_differences("gptneox", "fastertransformer", parse(path))
    assert any("input beam_search_diversity_rate: upstream" in p and "ours None" in p for p in problems), problems
    assert any("input bad_words_list" in p for p in problems), problems


def test_every_config_parses_with_tritons_schema_for_every_family(every_family):
    assert set(FAMILIES) == set(UPSTREAM)  # every_family rendered each of them once, as here
    for family, model_type in FAMILIES.items():
        repo = every_family / family
        configs = {name: parse(repo / name / "config.pbtxt")
                   for name in ("fastertransformer", "ensemble", "preprocessing", "postprocessing")}  # fmt: skip
        ft = configs["fastertransformer"]
        params = {k: v.string_value for k, v in ft.parameters.items()}
        assert ft.backend == "fastertransformer"
        assert [g.kind for g in ft.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_CPU]
        assert params["model_type"] == model_type
        assert params["tensor_para_size"] == "2"
        assert params["model_checkpoint_path"] == "/models/fastertransformer/1/2-gpu"
        assert ("int8_mode" in params) == (family in ("gpt", "llama", "bloom"))
        assert [s.model_name for s in configs["ensemble"].ensemble_scheduling.step] == [
            "preprocessing", "fastertransformer", "postprocessing"]  # fmt: skip
        assert configs["preprocessing"].parameters["tokenizer_dir"].string_value == "/tokenizer"


def test_the_config_names_the_revision_its_shards_were_made_from(playbook, tmp_path):
    """ftfleet_revision (what the gateways name in their answers): ft_convert's published fact when
    its plan ran in this run; else what its serving read found; else the published shards'
    conversion.json; else none at all."""

    def revision(root: Path, **extra) -> str | None:
        rc, out = render(playbook, root, ["gpt"], **extra)
        assert rc == 0, out
        params = parse(root / "gpt" / "fastertransformer" / "config.pbtxt").parameters
        return params["ftfleet_revision"].string_value if "ftfleet_revision" in params else None

    assert revision(tmp_path / "none") is None
    shards = tmp_path / "published" / "gpt" / "fastertransformer" / "1" / "2-gpu"
    shards.mkdir(parents=True)
    (shards / "conversion.json").write_text(json.dumps({"inputs": {"checkpoint": "a" * 40, "tp": 2}}))
    assert revision(tmp_path / "published") == "a" * 40
    assert revision(tmp_path / "published", ft_convert_revision="b" * 40) == "b" * 40
    # Role canary's choice read the published shards already (ft_convert's serving): no second read.
    assert revision(tmp_path / "published", ft_convert_serving={"checkpoint": "c" * 40}) == "c" * 40


@pytest.mark.parametrize(
    ("extra", "message"),
    [({"triton_model_repo_dynamic_batching": True, "triton_model_repo_sequence_batching": True},
      "both true: Triton takes one or the other"),
     ({"triton_model_repo_sequence_batching": True}, "sequence_batching needs triton_model_repo_max_batch_size 1"),
     ({"triton_model_repo_int8_mode": 1}, "the gptj backend has no int8 mode"),
     ({"triton_model_repo_int8_mode": 3}, "valid 0, 1 (weight-only), 2")],
)  # fmt: skip
def test_invalid_combinations_are_refused(playbook, tmp_path, extra, message):
    rc, out = render(playbook, tmp_path / "repos", ["gptj"], **extra)
    assert rc != 0
    assert message in out
    assert not (tmp_path / "repos" / "gptj").exists()  # refused before writing anything


def test_max_batch_size_0_serves_the_largest_batch_the_memory_plan_fits(playbook, tmp_path):
    """triton_model_repo_max_batch_size 0: every model's max_batch_size, and the dynamic batcher's
    queue, are the batch role preflight's memory plan found (preflight_memory_plan); without a plan
    in the run the role refuses before writing anything."""
    plan = {"plan": {"max_batch_size": 38}}
    rc, out = render(playbook, tmp_path / "repos", ["gptj"], triton_model_repo_max_batch_size=0,
                     triton_model_repo_dynamic_batching=True, preflight_memory_plan=plan)  # fmt: skip
    assert rc == 0, out[-3000:]
    for model in ("fastertransformer", "ensemble", "preprocessing", "postprocessing"):
        assert parse(tmp_path / "repos" / "gptj" / model / "config.pbtxt").max_batch_size == 38, model
    config = parse(tmp_path / "repos" / "gptj" / "fastertransformer" / "config.pbtxt")
    assert config.dynamic_batching.default_queue_policy.max_queue_size == 38
    rc, out = render(playbook, tmp_path / "bare", ["gptj"], triton_model_repo_max_batch_size=0)
    assert rc != 0
    said = " ".join(out.split())
    assert "triton_model_repo_max_batch_size=0 takes the largest batch the GPU memory plan fits" in said
    assert not (tmp_path / "bare" / "gptj").exists()


def test_int8_with_fp32_is_refused(playbook, tmp_path):
    rc, out = render(playbook, tmp_path / "repos", ["gpt"], model=", data_type: fp32", triton_model_repo_int8_mode=1)
    assert rc != 0
    assert "with fleet_model.data_type=fp32: int8 needs fp16 or bf16" in out


def test_the_removed_python_path_is_refused_with_what_to_do_instead(playbook, tmp_path):
    """The tokenizing models no longer extend their import path from config.pbtxt: a variable that
    once did so is refused, not silently ignored."""
    rc, out = render(playbook, tmp_path / "repos", ["gpt"], triton_model_repo_python_path="/opt/site")
    assert rc != 0
    assert "triton_model_repo_python_path is no more" in out
    assert ".pth file" in out


def served_repository(playbook, tmp_path: Path, family: str, **extra):
    """A tiny model of the family, its repository as the role writes it for tp 2 (and `extra`)
    and its shards, config.pbtxt unchanged. Returns (tokenizer, model, repository, shards)."""
    checkpoint = tmp_path / "checkpoint"
    tokenizer, model = tiny_model(family, checkpoint)
    repo = tmp_path / "repos" / family
    rc, out = render(playbook, tmp_path / "repos", [family], container=str(repo), tokenizer=str(checkpoint),
                     fleet_tensor_para_size=2, **extra)  # fmt: skip
    assert rc == 0, out
    shards = convert(checkpoint, repo / "fastertransformer" / "1", family, 2, "fp32", log=lambda _m: None)
    return tokenizer, model, repo, shards


# What fastertransformer_backend's docker/Dockerfile installs for the tokenizing models, unpinned
# (`pip3 install transformers huggingface_hub tokenizers SentencePiece ...`): on each serving
# image's Python, pip's choice of today. Binary wheels only: the images have no Rust compiler,
# and for Python 3.8 the newest tokenizers is a source release that needs one. Beside them the
# numpy that NGC's Triton images bring for the Python backend, a 1.x (pip keeps a satisfied
# requirement): the backend's triton_python_backend_utils fails to read BYTES tensors with numpy 2
# (seen here with 2.2.6: "unpack_from requires a buffer of at least ..." and a dead stub).
UPSTREAM_TOKENIZING = ["numpy<2", "transformers", "huggingface_hub", "tokenizers", "SentencePiece"]


# Each family is served once, on a Python of a serving image: NGC's Triton images have Python 3.8
# up to 23.02 (Ubuntu 20.04: the default 22.04, the KoGPT and GPT-J guides), 3.10 from 23.04
# (Ubuntu 22.04: the prod LLaMA group), 3.12 for 25.04 (Ubuntu 24.04), each with what pip gives
# it for upstream's unpinned list; the other two families on this machine's Python with the
# project's pins (docs/testing.md, "Where each file runs").
SERVED_ON = {"gptj": "3.8", "llama": "3.10", "gpt": "3.12", "gptneox": "", "bloom": ""}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_repository_loads_in_tritonserver_and_answers_through_the_ensemble(playbook, tmp_path, family):
    """The repository as the role writes it, config.pbtxt unchanged:
    `backend: "fastertransformer"` is served by a
    Python-based backend of that name (backends/fastertransformer/model.py, the CPU stand-in),
    as in the lab's serving image, so Triton validates the real configuration and ensemble. The
    model repository's Python (preprocessing, postprocessing, tokenizer_model) runs in the Python
    backend's stub for the family's Python (SERVED_ON), answering as transformers does."""
    python = SERVED_ON[family]
    if not python:
        tokenizer, model, repo, _ = served_repository(playbook, tmp_path, family)
        assert_ensemble_answers(repo, tmp_path, tokenizer, model)
        return
    from tritonlocal import installed, python_env  # noqa: PLC0415

    venv = python_env(python, UPSTREAM_TOKENIZING, "--only-binary=:all:")
    versions = installed(venv, "transformers", "tokenizers", "numpy", "sentencepiece")
    print(f"{family} on Python {python}: {versions}")
    tokenizer, model, repo, _ = served_repository(playbook, tmp_path, family)
    assert_ensemble_answers(repo, tmp_path, tokenizer, model, python=venv)


def assert_ensemble_answers(repo: Path, tmp_path: Path, tokenizer, model, python: Path | None = None) -> None:
    """The ensemble's answer over HTTP equals transformers' greedy generate(), prompt included."""
    with tritonserver(repo, tmp_path, python) as server:
        prompt = "Ansible automation that takes bare GPU hosts"
        body = {"inputs": [
            {"name": "INPUT_0", "shape": [1, 1], "datatype": "BYTES", "data": [prompt]},
            {"name": "INPUT_1", "shape": [1, 1], "datatype": "UINT32", "data": [12]},
            {"name": "INPUT_2", "shape": [1, 1], "datatype": "BYTES", "data": [""]},
            {"name": "INPUT_3", "shape": [1, 1], "datatype": "BYTES", "data": [""]},
        ]}  # fmt: skip
        request = urllib.request.Request(f"http://127.0.0.1:{server.http}/v2/models/ensemble/infer",
                                         data=json.dumps(body).encode(), method="POST")  # fmt: skip
        try:
            answer = json.loads(urllib.request.urlopen(request, timeout=60).read())
        except urllib.error.HTTPError as err:
            raise AssertionError(f"{err}: {err.read().decode()}\n{server_errors(server.log)}") from err
    text = next(o for o in answer["outputs"] if o["name"] == "OUTPUT_0")["data"][0]
    ids = tokenizer.encode(prompt)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    with torch.no_grad():
        reference = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                                   pad_token_id=tokenizer.eos_token_id)[0].tolist()  # fmt: skip
    assert text == tokenizer.decode(reference)
    assert text.startswith(prompt)


@pytest.mark.parametrize("family", ["gptneox", "gpt"])
def test_the_clients_of_fastertransformer_backend_work_unchanged(playbook, tmp_path, family):
    """Over HTTP and gRPC, to a real tritonserver: the fastertransformer model with every input
    the guides' clients send (GPT-NeoX's end-to-end client always sends beam_search_diversity_rate),
    and the ensemble with INPUT_0..3 and sampling inputs; each answer equals the reference decoder's
    (FT's repetition penalty, its log probabilities) on the same shards."""
    from ftnative.decode import load  # noqa: PLC0415

    tokenizer, _, repo, shards = served_repository(playbook, tmp_path, family)
    prompt = "Ansible automation that takes bare GPU hosts"
    ids, end_id = tokenizer.encode(prompt), tokenizer.eos_token_id
    reference = list(load(shards).steps(ids, 10, repetition_penalty=1.3, end_id=end_id))
    tokens, cum = [s.token for s in reference], reference[-1].cum_log_prob
    with tritonserver(repo, tmp_path) as server:
        # tests/guideclients.py: the guides' clients' requests, their exact tensors, 10 tokens with
        # FT's repetition penalty at 1.3
        seen = run_clients(f"127.0.0.1:{server.http}", f"127.0.0.1:{server.grpc}", prompt, tokens=10, end_id=end_id,
                           repetition_penalty=1.3, beam=2)  # fmt: skip
        assert seen["ids"] == ids  # the server's preprocessing tokenizes as the tokenizer does
        for protocol in ("http", "grpc"):
            answer = seen["fastertransformer"][protocol]
            assert answer["output_ids"] == ids + tokens, protocol
            assert answer["cum_log_probs"] == pytest.approx(cum, abs=1e-4)
            assert answer["text"] == tokenizer.decode(ids + tokens), protocol
            assert seen["ensemble"][protocol]["text"] == tokenizer.decode(ids + tokens), protocol
            assert seen["ensemble"][protocol]["cum_log_probs"] == pytest.approx(cum, abs=1e-4)
        # beam search, as the identity client asks for it (beam_width 2, len_penalty, diversity 0)
        expected = load(shards).beam_search(ids, 10, 2, len_penalty=1.0, repetition_penalty=1.3, end_id=end_id)
        assert seen["beam"]["output_ids"] == [b.tokens for b in expected]
        assert seen["beam"]["cum_log_probs"] == pytest.approx([b.cum for b in expected], abs=1e-4)
        # scripts/ftfleet-query sends the same sampling inputs through the ensemble
        query = [sys.executable, str(ROOT / "scripts" / "ftfleet-query"), "--url", f"http://127.0.0.1:{server.http}",
                 "--tokens", "10", "--repetition-penalty", "1.3", "--log-probs", prompt]  # fmt: skip
        done = subprocess.run(query, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(tokenizer.decode(ids + tokens) + "\n")
        assert f"cum_log_probs: {cum:.4f}" in done.stdout


def test_identity_tests_decoupled_mode_streams_a_response_per_token_from_a_decoupled_model(playbook, tmp_path):
    """With triton_model_repo_decoupled (the lab's setting), the same tensors over gRPC streaming
    as identity_test.py --decoupled sends them: one response per generated token from the
    fastertransformer model and from the ensemble (as identity_test counts them), the last one
    the reference decoder's answer; beam search streamed too. The unary requests of the other
    clients are refused, over HTTP with the 501 that docs/operations.md quotes."""
    from ftnative.decode import load  # noqa: PLC0415

    tokenizer, _, repo, shards = served_repository(playbook, tmp_path, "gpt", triton_model_repo_decoupled=True)
    assert "decoupled: true" in (repo / "fastertransformer" / "config.pbtxt").read_text()
    prompt = "Ansible automation that takes bare GPU hosts"
    ids, end_id = tokenizer.encode(prompt), tokenizer.eos_token_id
    reference = list(load(shards).steps(ids, 10, repetition_penalty=1.3, end_id=end_id))
    tokens, cum = [s.token for s in reference], reference[-1].cum_log_prob
    assert len(tokens) == 10  # no early end: identity_test's count is the output length
    with tritonserver(repo, tmp_path) as server:
        http, grpc = f"127.0.0.1:{server.http}", f"127.0.0.1:{server.grpc}"
        seen = run_clients(http, grpc, prompt, tokens=10, end_id=end_id, repetition_penalty=1.3, beam=2,
                           streamed=True)  # fmt: skip
        print(f"streamed: {json.dumps(seen)}")
        answer = seen["fastertransformer"]["grpc-stream"]
        assert answer["output_ids"] == ids + tokens
        assert answer["cum_log_probs"] == pytest.approx(cum, abs=1e-4)
        assert answer["text"] == tokenizer.decode(ids + tokens)
        assert answer["responses"] == 10
        ensemble = seen["ensemble"]["grpc-stream"]
        assert ensemble["text"] == tokenizer.decode(ids + tokens)
        assert ensemble["cum_log_probs"] == pytest.approx(cum, abs=1e-4)
        assert ensemble["responses"] == 10
        expected = load(shards).beam_search(ids, 10, 2, len_penalty=1.0, repetition_penalty=1.3, end_id=end_id)
        assert seen["beam"]["output_ids"] == [b.tokens for b in expected]
        assert seen["beam"]["cum_log_probs"] == pytest.approx([b.cum for b in expected], abs=1e-4)
        with pytest.raises(InferenceServerException, match=r"\[501\] .*decoupled transaction policy") as refused:
            run_clients(http, grpc, prompt, tokens=10, end_id=end_id)
        print(f"unary to a decoupled model: {refused.value}")


def _threads_cpu(pid: int) -> dict[int, int]:
    """CPU ticks (user + system) of each thread of a process, from /proc."""
    ticks = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        ticks[int(task.name)] = int(fields[11]) + int(fields[12])
    return ticks


def test_the_stand_in_spends_its_cpu_decoding_not_spinning(playbook, tmp_path):
    """The CPU stand-in decodes with numpy, whose OpenBLAS runs a worker thread per core that
    spins between calls unless told to use one (OPENBLAS_NUM_THREADS, STAND_IN_ENV): under a
    steady stream of requests its workers took 8.8 s of CPU where the thread that decodes took
    0.5 s (the lab, 100 completions), and every load test paid for it. Over 60 requests to the
    fastertransformer model, the stub's other threads must use less CPU than the decoding one;
    and the lab's serving image sets the same environment as this test's tritonserver."""
    import tritonclient.http as httpclient  # noqa: PLC0415
    from tritonlocal import STAND_IN_ENV, python_env  # noqa: PLC0415

    dockerfile = (ROOT / "lab" / "tritonserver-cpu.Dockerfile").read_text().replace("\\\n", " ")
    env_lines = " ".join(line for line in dockerfile.splitlines() if line.startswith("ENV "))
    for name, value in STAND_IN_ENV.items():
        assert f"{name}={value}" in env_lines.split(), f"lab/tritonserver-cpu.Dockerfile does not set {name}={value}"

    # numpy from the package index, as the serving images have it: its wheel bundles a threaded
    # OpenBLAS (Debian's python3-numpy, this machine's system one, may use the single-threaded
    # reference BLAS, where there is nothing to see). The gpt family's environment of the test above.
    venv = python_env(SERVED_ON["gpt"], UPSTREAM_TOKENIZING, "--only-binary=:all:")
    tokenizer, _, repo, _ = served_repository(playbook, tmp_path, "gpt")
    ids, end_id = tokenizer.encode("Ansible automation that takes bare GPU hosts"), tokenizer.eos_token_id
    with tritonserver(repo, tmp_path, venv) as server:
        url = f"127.0.0.1:{server.http}"
        infer(httpclient, url, "fastertransformer", ft_request(ids, 10, end_id, 1.3), ["output_ids"])  # warm
        found = subprocess.run(["pgrep", "-f", f"triton_python_backend_stub {repo}/fastertransformer/"],
                               capture_output=True, text=True, check=False).stdout.split()  # fmt: skip
        assert len(found) == 1, found
        stub = int(found[0])
        before = _threads_cpu(stub)
        for _ in range(60):
            infer(httpclient, url, "fastertransformer", ft_request(ids, 10, end_id, 1.3), ["output_ids"])
            time.sleep(0.02)  # a gap between requests, as a load's clients leave: where a worker spins
        after = _threads_cpu(stub)
    used = {tid: after[tid] - before.get(tid, 0) for tid in after}
    others = sum(ticks for tid, ticks in used.items() if tid != stub)
    print(f"the stand-in's CPU over 60 requests, in ticks: decoding thread {used[stub]}, its other threads {others}")
    assert used[stub] > 0, used
    assert others < used[stub], used


def test_an_early_llama_conversion_named_llamatokenizer_serves(playbook, tmp_path):
    """decapoda-research/llama-7b-hf's tokenizer files, which inventories/prod serves: only the
    SentencePiece tokenizer.model, and a tokenizer_config.json naming `LLaMATokenizer` (a class
    no transformers has) with empty special tokens. AutoTokenizer cannot load it; the tokenizing
    models load LlamaTokenizer, as the LLaMA guide's do. Through a real tritonserver: the prompt's
    ids are SentencePiece's own after <s>, the fastertransformer model's answer is the reference
    decoder's, and the ensemble's text is those ids decoded (<s> shown). (The random model's
    bytes need not be UTF-8; SentencePiece and transformers replace broken ones differently.)"""
    spm = pytest.importorskip("sentencepiece")
    import numpy as np  # noqa: PLC0415
    import tritonclient.grpc as grpcclient  # noqa: PLC0415

    from ftnative.decode import load  # noqa: PLC0415

    sys.path.insert(0, str(ROOT / "roles" / "triton_model_repo" / "files"))
    from tokenizer_model import load_tokenizer  # noqa: PLC0415

    byte_level, _, repo, shards = served_repository(playbook, tmp_path, "llama")
    checkpoint = tmp_path / "checkpoint"
    for leftover in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (checkpoint / leftover).unlink(missing_ok=True)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text((ROOT / "lab" / "corpus.md").read_text())
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(checkpoint / "tokenizer"), model_type="bpe",
                                   vocab_size=len(byte_level), unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                   byte_fallback=True, character_coverage=1.0, remove_extra_whitespaces=False,
                                   normalization_rule_name="identity", minloglevel=2)  # fmt: skip
    decapoda = {"bos_token": "", "eos_token": "", "model_max_length": 1e30, "tokenizer_class": "LLaMATokenizer",
                "unk_token": ""}  # fmt: skip
    (checkpoint / "tokenizer_config.json").write_text(json.dumps(decapoda))
    (checkpoint / "special_tokens_map.json").write_text("{}")
    with pytest.raises((ValueError, RecursionError)):  # what a plain AutoTokenizer does with these files
        transformers.AutoTokenizer.from_pretrained(checkpoint)

    sp = spm.SentencePieceProcessor(model_file=str(checkpoint / "tokenizer.model"))
    prompt = "Ansible automation that takes  bare GPU hosts: ünïcode"
    ids = [sp.bos_id(), *sp.encode(prompt)]
    decoder = load(shards)
    new = decoder.generate(ids, 10, end_id=decoder.params.get("end_id"))
    tokenizer = load_tokenizer(str(checkpoint))
    assert tokenizer.encode(prompt) == ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == sp.decode(ids) == prompt
    text = np.array([[prompt.encode()]], dtype=object)
    words = np.array([[b""]], dtype=object)
    with tritonserver(repo, tmp_path) as server:
        url = f"127.0.0.1:{server.grpc}"
        asked = {"QUERY": text, "REQUEST_OUTPUT_LEN": np.array([[10]], np.uint32), "BAD_WORDS_DICT": words,
                 "STOP_WORDS_DICT": words}  # fmt: skip
        pre = infer(grpcclient, url, "preprocessing", asked, ["INPUT_ID", "REQUEST_INPUT_LEN"])
        assert pre["INPUT_ID"].reshape(-1)[: int(pre["REQUEST_INPUT_LEN"].reshape(-1)[0])].tolist() == ids
        ensemble = {"INPUT_0": text, "INPUT_1": np.array([[10]], dtype=np.uint32), "INPUT_2": words, "INPUT_3": words}
        answer = infer(grpcclient, url, "ensemble", ensemble, ["OUTPUT_0"])
    assert answer["OUTPUT_0"].reshape(-1)[0].decode() == tokenizer.decode(ids + new)
    assert answer["OUTPUT_0"].reshape(-1)[0].decode().startswith("<s> " + prompt)
