"""fleet_input_problems: every class of bad input named with its variable, value and fix; the
container -> CUDA -> buildable SM table; config.json shapes the converters cannot take."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
from configs import GPTJ_6B, LLAMA_7B

from ftdomain.errors import AnsibleFilterError
from ftdomain.fleet.gateway import triton_final_response
from ftdomain.ft.cuda import container_sms
from ftdomain.inputs import derived
from ftdomain.inputs.checks import fleet_input_names, fleet_input_problems, ft_model_params_problems
from ftdomain.inputs.derived import role_outputs, role_specs
from ftdomain.inputs.server import triton_model_repo_problems

MODEL = {"name": "kogpt", "family": "gptj", "source": {"url": "https://huggingface.co/kakaobrain/kogpt",
                                                       "revision": "KoGPT6B-ryan1.5b-float16"}}  # fmt: skip
GOOD = {
    "fleet_data_root": "/srv/ftfleet",
    "fleet_triton_container_version": "22.04",
    "fleet_ft_container_version": "22.04",
    "fleet_model": MODEL,
    "fleet_convert_engine": "native",
    "fleet_gpu_devices": [0, 1],
    "fleet_pipeline_para_size": 1,
    "fleet_tensor_para_size": "2",
    "fleet_require_gpus": True,
    "fleet_hf_token": "",
}


def gpus(name: str, cc: str, count: int = 2) -> dict:
    return {"count": count, "devices": [{"index": i, "name": name, "compute_capability": cc} for i in range(count)]}


A100 = gpus("NVIDIA A100-SXM4-80GB", "8.0")
H100 = gpus("NVIDIA H100 80GB HBM3", "9.0")
T4 = gpus("Tesla T4", "7.5")


def test_the_defaults_and_a_valid_host_have_no_problem():
    assert fleet_input_problems(GOOD, A100) == []
    assert fleet_input_problems({**GOOD, "fleet_triton_container_version": "23.04",
                                 "fleet_ft_container_version": "23.04"}, H100) == []  # fmt: skip


@pytest.mark.parametrize("serial", [1, "3", "25%", "100%", [1, "10%", "50%"], [2, 5]])
def test_every_form_of_ansibles_serial_is_a_rollout(serial):
    assert fleet_input_problems({**GOOD, "fleet_serve_serial": serial}, A100) == []


@pytest.mark.parametrize(
    ("container", "cuda", "sms"),
    [
        ("22.04", "11.6", ["60", "61", "70", "75", "80", "86"]),
        ("22.08", "11.7", ["60", "61", "70", "75", "80", "86"]),
        ("22.10", "11.8", ["60", "61", "70", "75", "80", "86", "89", "90"]),
        ("23.04-py3", "12.1", ["60", "61", "70", "75", "80", "86", "89", "90"]),
        ("25.04", "12.9", ["60", "61", "70", "75", "80", "86", "89", "90"]),
    ],
)
def test_container_cuda_and_buildable_sms(container, cuda, sms):
    table = container_sms(container)
    assert table["cuda"] == cuda
    assert table["sms"] == sms


@pytest.mark.parametrize("bad", [22.1, "22.09", "latest", None])
def test_container_sms_refuses_unknown_versions(bad):
    with pytest.raises(AnsibleFilterError, match="triton_min_driver: "):
        container_sms(bad)


@pytest.mark.parametrize(
    ("case", "change", "facts", "problem"),
    [
        ("duplicate GPU", {"fleet_gpu_devices": [0, 0]}, A100,
         "fleet_gpu_devices=[0, 0]: index 0 is listed twice; fix: list each GPU of the host once"),
        ("negative GPU", {"fleet_gpu_devices": [-1]}, A100, "fleet_gpu_devices=[-1]: indices must be >= 0"),
        ("GPU list of strings", {"fleet_gpu_devices": "0,1"}, A100, "fleet_gpu_devices='0,1': must be a list"),
        ("Hopper on 22.04", {}, H100,
         "fleet_ft_container_version=22.04: its CUDA 11.6 cannot build FT for GPU 0, 1 (NVIDIA H100 80GB HBM3, SM 90;"
         " it builds SM 60, 61, 70, 75, 80, 86); fix: 22.10 or later"),
        ("Hopper, Triton side", {"fleet_ft_container_version": "23.04"}, H100,
         "fleet_triton_container_version=22.04: its CUDA 11.6 cannot build FT for GPU 0, 1 (NVIDIA H100"),
        ("bf16 before Ampere", {"fleet_model": {**MODEL, "data_type": "bf16"}}, T4,
         "fleet_model.data_type=bf16: GPU 0, 1 (Tesla T4, SM 75) has no bf16 (SM 80 or later); fix: data_type fp16"),
        ("ft_image_sm not covering", {"ft_image_sm": "80", "fleet_ft_container_version": "23.04",
                                      "fleet_triton_container_version": "23.04"}, H100,
         "ft_image_sm='80': does not cover the assigned GPUs (SM 90)"),
        ("unknown container", {"fleet_triton_container_version": "22.09"}, A100,
         "fleet_triton_container_version='22.09': unknown Triton container version '22.09' (known: 22.03"),
        ("unquoted container", {"fleet_ft_container_version": 22.1}, A100,
         "fleet_ft_container_version=22.1: container version 22.1 must be a string like '22.04' (quote it"),
        ("same HTTP and gRPC port", {"triton_server_http_port": 8001}, A100,
         "triton_server_http_port=8001, triton_server_grpc_port=8001, triton_server_metrics_port=8002: two of them"),
        ("port out of range", {"triton_server_metrics_port": 70000}, A100,
         "triton_server_metrics_port=70000: out of range (valid: 1-65535)"),
        ("port of the wrong type", {"triton_server_grpc_port": "80x"}, A100,
         "triton_server_grpc_port='80x': argument 'triton_server_grpc_port' is of type str and we were unable "
         "to convert to int"),
        ("relative data root", {"fleet_data_root": "srv/ftfleet"}, A100,
         "fleet_data_root='srv/ftfleet': must be an absolute, normalized path"),
        ("data root with a space", {"fleet_data_root": "/srv/ft fleet"}, A100, "fleet_data_root='/srv/ft fleet'"),
        ("data root not normalized", {"fleet_data_root": "/srv/ftfleet/"}, A100, "fleet_data_root='/srv/ftfleet/'"),
        ("model name with a slash", {"fleet_model": {**MODEL, "name": "kakaobrain/kogpt"}}, A100,
         "fleet_model.name='kakaobrain/kogpt': must be letters, digits and ._-"),
        ("url without a scheme", {"fleet_model": {**MODEL, "source": {**MODEL["source"], "url": "hf.co/x"}}}, A100,
         "fleet_model.source.url='hf.co/x': not a git URL"),
        ("pipeline size 0", {"fleet_pipeline_para_size": 0}, A100,
         "fleet_pipeline_para_size=0: must be a whole number >= 1"),
        ("engine", {"fleet_convert_engine": "fast"}, A100, "fleet_convert_engine='fast': must be native or upstream"),
        ("quoted boolean", {"fleet_require_gpus": "false"}, A100,
         "fleet_require_gpus='false': must be true or false (a quoted string is always true in a condition)"),
        ("fleet typo", {"fleet_gpu_device": [0]}, A100,
         "fleet_gpu_device=[0]: no such fleet variable; fix: did you mean fleet_gpu_devices?"),
        ("role typo", {"triton_server_http_prot": 8000}, A100,
         "triton_server_http_prot=8000: no such variable in role triton_server; fix: did you mean "
         "triton_server_http_port?"),
        ("bad choice", {"docker_engine_source": "snap"}, A100,
         "docker_engine_source='snap': value of docker_engine_source must be one of: docker-ce, distro, got: snap"),
        ("bad boolean", {"triton_server_mpirun": "maybe"}, A100, "triton_server_mpirun='maybe': argument"),
        ("converter tp differs", {"ft_convert_tp": 4}, A100,
         "ft_convert_tp=4 but fleet_tensor_para_size=2: shards and tuning must be made for the serving"),
        ("tuner tp differs", {"ft_gemm_tune_tp": 1}, A100, "ft_gemm_tune_tp=1 but fleet_tensor_para_size=2"),
        ("int8 on gptj", {"triton_model_repo_int8_mode": 1}, A100,
         "triton_model_repo_int8_mode=1: the gptj backend has no int8 mode"),
        ("int8 with fp32", {"triton_model_repo_int8_mode": 1, "fleet_model": {**MODEL, "family": "gpt",
                                                                              "data_type": "fp32"}}, A100,
         "triton_model_repo_int8_mode=1 with fleet_model.data_type=fp32: int8 needs fp16 or bf16"),
        ("int8 mode 3", {"triton_model_repo_int8_mode": 3, "fleet_model": {**MODEL, "family": "gpt"}}, A100,
         "triton_model_repo_int8_mode=3: valid 0, 1 (weight-only), 2"),
        ("both batchings", {"triton_model_repo_dynamic_batching": True, "triton_model_repo_sequence_batching": True},
         A100, "triton_model_repo_dynamic_batching and triton_model_repo_sequence_batching are both true"),
        ("sequence batching with a batch", {"triton_model_repo_sequence_batching": True}, A100,
         "triton_model_repo_sequence_batching needs triton_model_repo_max_batch_size 1, not 128"),
        ("batch size -1", {"triton_model_repo_max_batch_size": -1}, A100,
         "triton_model_repo_max_batch_size=-1: out of range (valid: >= 0)"),
        ("gemm batch 0", {"ft_gemm_tune_batch_size": 0}, A100, "ft_gemm_tune_batch_size=0: out of range"),
        ("bind address", {"triton_server_bind_address": "localhost:8000"}, A100,
         "triton_server_bind_address='localhost:8000': not an IP address"),
        ("shm size", {"triton_server_shm_size": "4 GB"}, A100, "triton_server_shm_size='4 GB': not a size docker"),
        ("ulimit", {"triton_server_ulimits": ["memlock unlimited"]}, A100,
         "triton_server_ulimits: 'memlock unlimited' is not NAME=SOFT[:HARD]"),
        ("unit name", {"triton_server_model_name": "my model"}, A100, "triton_server_model_name='my model': must be"),
        ("relative path", {"model_checkpoint_dir": "checkpoints/kogpt"}, A100,
         "model_checkpoint_dir='checkpoints/kogpt': must be an absolute path"),
        ("relative container path", {"triton_model_repo_container_dir": "models"}, A100,
         "triton_model_repo_container_dir='models': must be an absolute path"),
        ("driver branch", {"nvidia_driver_branch": "latest"}, A100,
         "nvidia_driver_branch='latest': must be a driver branch such as '535'"),
        ("token with a line break", {"fleet_hf_token": "hf_abc\n"}, A100, "fleet_hf_token: must be one word"),
        ("serve serial", {"fleet_serve_serial": "0"}, A100, "fleet_serve_serial='0': must be a number >= 1"),
        ("serve batches", {"fleet_serve_serial": [1, "10%", "0%"]}, A100,
         "fleet_serve_serial=[1, '10%', '0%']: must be a number >= 1, a percentage 1%-100%, or a list of them"),
        ("no serve batches", {"fleet_serve_serial": []}, A100, "fleet_serve_serial=[]: must be a number >= 1"),
        ("max fail", {"fleet_serve_max_fail_percentage": 150}, A100, "fleet_serve_max_fail_percentage=150"),
        ("canary hosts", {"fleet_canary_hosts": -1}, A100, "fleet_canary_hosts=-1: must be a whole number >= 0"),
        ("canary weight", {"fleet_canary_weight": 0}, A100,
         "fleet_canary_weight=0: must be a whole number from 1 to 100"),
        ("canary weight over", {"fleet_canary_weight": "150"}, A100, "fleet_canary_weight='150': must be a whole"),
        ("canary window", {"fleet_canary_seconds": 5}, A100,
         "fleet_canary_seconds=5: must be a whole number of seconds >= 10"),
        ("canary window in words", {"fleet_canary_seconds": "2m"}, A100, "fleet_canary_seconds='2m': must be"),
        ("canary error ratio", {"fleet_canary_max_error_ratio": 5}, A100,
         "fleet_canary_max_error_ratio=5: must be a number from 0 to 1"),
        ("canary p95", {"fleet_canary_max_p95_ratio": 0.9}, A100,
         "fleet_canary_max_p95_ratio=0.9: must be a number >= 1"),
        ("canary restarts", {"fleet_canary_max_restarts": True}, A100,
         "fleet_canary_max_restarts=True: must be a whole"),
        ("golden prompts not a list", {"fleet_canary_golden_prompts": "Hello"}, A100,
         "fleet_canary_golden_prompts='Hello': must be a list of {prompt, expected}"),
        ("golden prompt without an answer", {"fleet_canary_golden_prompts": [{"prompt": "Hello"}]}, A100,
         "fleet_canary_golden_prompts[0]: needs exactly one of expected (the whole completion) or expected_prefix"),
        ("golden prompt with both answers",
         {"fleet_canary_golden_prompts": [{"prompt": "Hi", "expected": " a", "expected_prefix": " a"}]}, A100,
         "fleet_canary_golden_prompts[0]: needs exactly one of expected"),
        ("golden prompt typo", {"fleet_canary_golden_prompts": [{"prompt": "Hi", "expect": " a"}]}, A100,
         "fleet_canary_golden_prompts[0]: unknown key(s) expect; fix: prompt, expected or expected_prefix or "
         "expected_regex, max_tokens"),
        ("golden prompt empty", {"fleet_canary_golden_prompts": [{"prompt": "", "expected": " a"}]}, A100,
         "fleet_canary_golden_prompts[0]: prompt must be a text that is not empty"),
        ("golden prompt tokens", {"fleet_canary_golden_prompts": [{"prompt": "Hi", "expected": " a", "max_tokens": 0}]},
         A100, "fleet_canary_golden_prompts[0]: max_tokens=0: must be a whole number >= 1"),
        ("golden prompt regex", {"fleet_canary_golden_prompts": [{"prompt": "Hi", "expected_regex": "a("}]}, A100,
         "fleet_canary_golden_prompts[0]: expected_regex='a(': not a regular expression (missing ), unterminated"),
        ("golden prompt not a mapping", {"fleet_canary_golden_prompts": ["Hi"]}, A100,
         "fleet_canary_golden_prompts[0]='Hi': must be a mapping"),
        ("golden prompts without a gateway",
         {"fleet_gateway": False, "fleet_canary_golden_prompts": [{"prompt": "Hi", "expected_prefix": " a"}]}, A100,
         "fleet_canary_golden_prompts: the golden prompts are asked through the gateway; fix: fleet_gateway: true"),
        ("registry with a scheme", {"fleet_registry": "https://registry.example.com"}, A100,
         "fleet_registry='https://registry.example.com': must be host[:port][/path] without the scheme"),
        ("registry in capitals", {"fleet_registry": "Registry.example.com/ftfleet"}, A100,
         "fleet_registry='Registry.example.com/ftfleet': must be host[:port][/path] in lower case"),
        ("registry port", {"fleet_registry": "registry:70000"}, A100, "fleet_registry='registry:70000': the port"),
        ("registry user alone", {"fleet_registry": "registry:5000", "fleet_registry_username": "ci"}, A100,
         "fleet_registry_username and fleet_registry_password: set both (basic auth) or neither"),
        ("registry credentials alone", {"fleet_registry_username": "ci", "fleet_registry_password": "pw"}, A100,
         "fleet_registry_username: credentials without fleet_registry"),
        ("registry insecure quoted", {"fleet_registry": "registry:5000", "fleet_registry_insecure": "true"}, A100,
         "fleet_registry_insecure='true': must be true or false, unquoted"),
        ("chat template unknown", {"fleet_gateway": True, "gateway_chat_template": "vicuna"}, A100,
         "gateway_chat_template='vicuna': no such template; fix: one of h2ogpt"),
        ("chat template path missing", {"fleet_gateway": True, "gateway_chat_template": "/nonexistent/chat.jinja"},
         A100, "gateway_chat_template='/nonexistent/chat.jinja': no such template"),
        ("registry CA not PEM", {"fleet_registry": "registry:5000", "fleet_registry_ca_certificate": "/etc/ca.pem"},
         A100, "fleet_registry_ca_certificate: must be the PEM text of a CA certificate"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None,
)  # fmt: skip
def test_each_bad_input_is_named_with_its_fix(case, change, facts, problem):
    problems = fleet_input_problems({**GOOD, **change}, facts)
    assert any(problem in p for p in problems), f"{case}: {problem!r} not in {problems}"


def test_the_token_never_appears_in_a_problem():
    problems = fleet_input_problems({**GOOD, "fleet_hf_token": "hf_secret value"}, A100)
    assert problems == ["fleet_hf_token: must be one word without spaces or line breaks; fix: the vault file"]


def test_the_registry_password_never_appears_in_a_problem():
    change = {"fleet_registry": "registry:5000", "fleet_registry_password": "s3cret\nline"}
    problems = fleet_input_problems({**GOOD, **change}, A100)
    assert problems == ["fleet_registry_password: must be one line of text; fix: the vault file"]
    good = {
        "fleet_registry": "registry.example.com:5000/ftfleet",
        "fleet_registry_username": "ci",
        "fleet_registry_password": "s3cret",
        "fleet_registry_ca_certificate": "-----BEGIN CERTIFICATE-----\n...",
    }
    assert fleet_input_problems({**GOOD, **good}, A100) == []


def test_every_problem_at_once():
    change = {"fleet_gpu_devices": [0, 0], "triton_server_http_port": 8001, "fleet_convert_engine": "x"}
    problems = fleet_input_problems({**GOOD, **change}, H100)
    assert len(problems) == 5, problems  # duplicates, ports, engine, and both containers for Hopper


def test_int8_mode_needs_a_gpu_with_fts_int8_kernels():
    """FT df4a753: weight-only int8 on SM 70 to 89, SmoothQuant on SM 80 to 89; elsewhere
    tritonserver aborts loading the weights ("Unsupported Arch" on an H100, docs/gpu-tier.md)."""
    gpt = {**GOOD, "fleet_model": {**MODEL, "name": "gpt2", "family": "gpt"}}
    hopper = {**gpt, "fleet_triton_container_version": "22.12", "fleet_ft_container_version": "22.12"}
    problems = fleet_input_problems({**hopper, "triton_model_repo_int8_mode": 1}, H100)
    assert problems == [next(p for p in problems if p.startswith("triton_model_repo_int8_mode=1 on compute capability "
                                                                   "9.0: FT's int8 kernels (int8_mode 1) run on SM 70 "
                                                                   "to 89 only"))]  # fmt: skip
    assert fleet_input_problems({**hopper, "triton_model_repo_int8_mode": 0}, H100) == []
    assert fleet_input_problems({**gpt, "triton_model_repo_int8_mode": 1}, A100) == []
    assert fleet_input_problems({**gpt, "triton_model_repo_int8_mode": 1}, T4) == []
    assert "int8_mode 2) run on SM 80 to 89" in " ".join(
        fleet_input_problems({**gpt, "triton_model_repo_int8_mode": 2}, T4)
    )
    # a family without int8 is told so once, by the model repository's check
    gptj = fleet_input_problems({**GOOD, "triton_model_repo_int8_mode": 1, "fleet_triton_container_version": "22.12",
                                 "fleet_ft_container_version": "22.12"}, H100)  # fmt: skip
    assert [p.split(":")[0] for p in gptj] == ["triton_model_repo_int8_mode=1"]


def test_without_gpus_the_gpu_checks_are_skipped():
    assert fleet_input_problems({**GOOD, "fleet_require_gpus": False}, H100) == []
    assert fleet_input_problems(GOOD) == []


def test_names_selects_fleet_and_role_variables():
    names = ["fleet_model", "triton_server_http_port", "ansible_host", "inventory_hostname", "__x", "gpu_facts_x", 3]
    assert fleet_input_names(names) == ["fleet_model", "gpu_facts_x", "triton_server_http_port"]
    with pytest.raises(AnsibleFilterError, match="fleet_input_names: expected a list"):
        fleet_input_names("fleet_model")


def test_bad_argument_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="fleet_input_problems: expected a dict"):
        fleet_input_problems(["fleet_model"])


def test_role_specs_and_outputs_come_from_the_roles():
    assert role_specs()["triton_server_http_port"][0] == "triton_server"
    assert "triton_image_built" in role_outputs()  # a fact the role sets, not an input


@pytest.mark.parametrize(
    ("config", "family", "problem"),
    [
        ({**LLAMA_7B, "num_key_value_heads": 8}, "llama", "grouped-query attention"),
        ({**GPTJ_6B, "n_head": 15}, "gptj", "hidden size 4096 is not a multiple of the head count 15"),
        ({**GPTJ_6B, "eos_token_id": None}, "gptj", "eos_token_id None"),
        ("not a dict", "gptj", "expected the parsed config.json (a dict)"),
    ],
)
def test_config_shapes_the_converter_cannot_take(config, family, problem):
    problems = ft_model_params_problems(config, family)
    assert len(problems) == 1
    assert problem in problems[0]


def test_a_good_config_has_no_shape_problem():
    assert ft_model_params_problems(GPTJ_6B, "gptj") == []


def test_model_repo_problems_alone():
    assert triton_model_repo_problems({"triton_model_repo_int8_mode": 0}, {"family": "gptj"}) == []


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"fleet_require_gpus": True}, None),  # preflight's memory plan finds the batch
        ({"fleet_require_gpus": False}, "fleet_require_gpus is false: there is no GPU to plan"),
        ({"fleet_require_gpus": True, "triton_model_repo_sequence_batching": True},
         "sequence_batching needs triton_model_repo_max_batch_size 1, not 0"),
        ({"fleet_require_gpus": True, "triton_model_repo_max_batch_size": -1}, "triton_model_repo_max_batch_size=-1"),
    ],
)  # fmt: skip
def test_max_batch_size_0_needs_gpus_to_plan(values, words):
    problems = triton_model_repo_problems({"triton_model_repo_max_batch_size": 0, **values}, {"family": "gptj"})
    assert [p for p in problems if words in p] if words else problems == [], problems


@pytest.mark.parametrize(
    ("version", "marks"),
    [
        ("23.04", False),  # the LLaMA guide's release: no final flag yet
        ("22.04", False),
        ("23.06", True),  # the first release that sends it
        ("23.10-py3", True),
        ("", False),  # unknown (an archive's image): the gateway reads the end from the answer
        ("latest", False),
    ],
)
def test_a_decoupled_model_behind_the_gateway_is_served_on_every_release(version, marks):
    """Before 23.06 Triton does not mark a decoupled answer's last response; the gateway reads the
    end from the answer (ftgateway/triton.py, _answers), so preflight refuses no release for it."""
    values = {**GOOD, "fleet_gateway": True, "triton_model_repo_decoupled": True}
    if version[:2].isdigit():
        values["fleet_ft_container_version"] = values["fleet_triton_container_version"] = version.removesuffix("-py3")
    assert not [p for p in fleet_input_problems(values, A100) if "decoupled" in p]
    assert triton_final_response(version) is marks


def test_a_shipped_chat_template_or_a_file_on_the_controller_is_accepted(tmp_path):
    own = tmp_path / "chat.jinja"
    own.write_text("{{ messages[0].content }}")
    for name in ("", "h2ogpt", str(own)):
        values = {**GOOD, "fleet_gateway": True, "gateway_chat_template": name}
        assert [p for p in fleet_input_problems(values, A100) if "chat_template" in p] == [], name


def test_the_derived_tables_come_from_the_file_made_for_the_same_files_only(tmp_path, monkeypatch):
    """Each host's check runs in a worker of its own: the tables derived from the roles' files come
    from a JSON file that make setup and the tests write (python -m ftdomain.inputs.derived), made
    from the same files (names, sizes, times), never from a stale one; a check never writes it."""
    kept = tmp_path / "fleet-inputs.json"
    monkeypatch.setattr(derived, "DERIVED", kept)
    derived.tables.cache_clear()
    fresh = derived.tables()
    assert not kept.exists()  # derived in memory: a filter writes nothing
    assert "fleet_model" in fresh["fleet"]
    assert fresh["specs"]["gateway_port"][0] == "gateway"
    assert derived.write(kept) == fresh
    assert json.loads(kept.read_text()) == fresh
    # the same signature: read from the file as it is
    kept.write_text(json.dumps({**fresh, "fleet": ["fleet_marker"]}))
    derived.tables.cache_clear()
    assert derived.tables()["fleet"] == ["fleet_marker"]
    # another signature (the files changed since): derived again, the file left as it was
    stale = {**fresh, "signature": "0" * 64, "fleet": ["fleet_marker"]}
    kept.write_text(json.dumps(stale))
    derived.tables.cache_clear()
    assert derived.tables() == fresh
    assert json.loads(kept.read_text()) == stale
    derived.tables.cache_clear()


class Lazy(Mapping):
    """Stands for Ansible's lazy containers (a Mapping that templates on access): a deep copy of
    one is what made the check cost most of its time per host (docs/performance.md)."""

    def __init__(self, data: dict) -> None:
        self.data = data

    def __getitem__(self, key):
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __deepcopy__(self, memo):
        raise AssertionError("the check deep-copied a container Ansible handed it")


def test_the_check_never_deep_copies_the_containers_ansible_hands_it():
    provided = {**GOOD, "fleet_model": Lazy({**MODEL, "source": Lazy(MODEL["source"])}),
                "container_image_build_args": Lazy({"FT_COMMIT": "abc"}), "docker_engine_packages": ["docker.io"],
                "docker_engine_daemon_options": "not a dict"}  # fmt: skip
    plain = json.loads(json.dumps(provided, default=dict))
    problems = fleet_input_problems(plain)
    assert [p.split(":")[0] for p in problems] == ["docker_engine_daemon_options='not a dict'"], problems
    assert fleet_input_problems(Lazy(provided)) == problems


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"fleet_triton_container_version": "25.04"}, True),
        ({"fleet_triton_container_version": "25.04-py3"}, True),
        ({"fleet_triton_container_version": "24.10"}, False),
        ({"fleet_triton_container_version": "22.04"}, False),
        ({"fleet_triton_container_version": "25.04", "triton_image_archive": "/srv/images/triton.tar"}, False),
        ({"fleet_triton_container_version": "25.04", "fleet_model": {}}, False),
    ],
)
def test_a_triton_release_no_image_can_be_built_for_is_refused(change, refused):
    values = {**GOOD, **change}
    problems = [p for p in fleet_input_problems(values) if "no Triton+FT image can be built" in p]
    assert bool(problems) == refused, problems
    if refused:
        assert problems[0].startswith(f"fleet_triton_container_version={change['fleet_triton_container_version']}: ")
        assert "torch 2.0.1, which has no wheel for its Python 3.12" in problems[0]
        assert "roles/triton_image/files/ftb/recipe.json" in problems[0]
        assert "fix: one of 22.03, 22.04, " in problems[0]
        assert ", 24.12, or triton_image_archive" in problems[0]
