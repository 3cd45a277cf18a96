"""The preflight stage against bad inputs: each run fails before any task changes anything,
and its output names every problem. Runs playbooks/preflight.yml for real on this machine (a
Debian 12 host) with recorded nvidia-smi outputs standing in for GPUs and local git
repositories standing in for the model sources."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run_playbook

sys.path.insert(0, str(ROOT / "tests" / "unit"))
from configs import GPT2, GPTJ_6B, H2OGPT_6_9B, KOGPT_6B, LLAMA_7B

RECORDINGS = ROOT / "tests" / "fixtures" / "gpus"


def git(*args: str, cwd: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin", "HOME": str(cwd)}  # fmt: skip
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def lfs_pointer(size: int, seed: str) -> str:
    """The text git-lfs commits in place of a file of `size` bytes (the object itself is absent)."""
    oid = hashlib.sha256(seed.encode()).hexdigest()
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"


def model_repo(root: Path, name: str, config: dict, branch: str = "main", *, weights: dict | None = None,
               files: dict | None = None) -> str:  # fmt: skip
    """A git repository holding a model's config.json, git-lfs pointers for its weights
    (`weights`: file name -> size; default one model.safetensors of 1 GB) and small JSON `files`
    (name -> content). The objects are absent: preflight reads only the pointers."""
    repo = root / "sources" / name
    repo.mkdir(parents=True)
    git("init", "-q", "-b", branch, cwd=repo)
    (repo / "config.json").write_text(json.dumps(config))
    for file, content in (files or {}).items():
        (repo / file).write_text(json.dumps(content))
    for file, size in (weights or {"model.safetensors": 1_000_000_000}).items():
        (repo / file).write_text(lfs_pointer(size, f"{name}/{file}") if size >= 0 else "{}")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "config", cwd=repo)
    return f"file://{repo}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("preflight")
    inventory = root / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_hosts:\n      hosts:\n        node1:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
    )
    sources = {
        "gpt2": model_repo(root, "gpt2", GPT2),
        "gptj": model_repo(root, "gpt-j-6b", GPTJ_6B),
        # A GPT-J-shaped model of 600 layers: about 120 B parameters, for the disk and memory checks.
        "huge": model_repo(root, "huge", {**GPTJ_6B, "n_layer": 600}, weights={"pytorch_model.bin": 240 * 10**9}),
        # GPT-2 small's width in 48 heads of 16: a head size FT's decoder attention has no kernel for.
        "narrow": model_repo(root, "narrow", {**GPT2, "n_head": 48}),
    }
    return {"root": root, "inventory": inventory, "sources": sources}


def preflight(lab, gpus: str, **overrides) -> tuple[int, str]:
    extra = {
        "ansible_become": False,
        "gpu_facts_fact_path": str(lab["root"] / "facts.d"),
        "gpu_facts_nvidia_smi": str(RECORDINGS / gpus / "nvidia-smi"),
        "preflight_config_cache": str(lab["root"] / "cache"),
        "fleet_data_root": str(lab["root"] / "data"),
        "fleet_model": {"name": "gpt2", "family": "gpt", "source": {"url": lab["sources"]["gpt2"], "revision": "main"}},
        "fleet_gpu_devices": [0],
        "fleet_api_keys": [{"name": "test", "key": "ftf-test-key-000000000001"}],
        # This machine is not a GPU host: its Docker images are not NGC's (a test below checks them).
        "preflight_image_bytes": {"ft_image": 10**9, "triton_image": 10**9},
        **overrides,
    }
    (lab["root"] / "extra.json").write_text(json.dumps(extra))
    result = run_playbook("playbooks/preflight.yml", "-i", lab["inventory"], "-e", f"@{lab['root'] / 'extra.json'}")
    return result.returncode, result.stdout + result.stderr


def changed_count(out: str) -> int:
    match = re.search(r"node1\s+: ok=\d+\s+changed=(\d+)", out)
    assert match, out
    return int(match.group(1))


def test_valid_inventory_passes(lab):
    rc, out = preflight(lab, "a100x1")
    assert rc == 0, out
    assert "preflight passed: gpt2 (gpt, tp 1 x pp 1 on GPUs 0; weights safetensors, 1.0 GB)" in " ".join(out.split())
    # A second run with the fact installed changes nothing: the baseline for the failing runs.
    rc, out = preflight(lab, "a100x1")
    assert rc == 0, out
    assert changed_count(out) == 0


def test_a_refused_release_says_why(lab):
    """A release the project leaves out for a known reason (Ubuntu 20.04: python3 3.8) is refused
    with that reason; here this machine's Debian 12 stands for it, left out and given a reason."""
    reasons = {"Debian 12": "its python3 is too old for the gateway (a stand-in reason)"}
    rc, out = preflight(lab, "a100x1", preflight_supported_os={"Ubuntu": ["22.04"]}, __preflight_os_refusals=reasons)
    said = " ".join(out.split())
    assert rc != 0, out
    assert ("operating system not supported (supported: Ubuntu 22.04): its python3 is too old for the gateway "
            "(a stand-in reason); fix: reinstall the host with a supported release") in said, said  # fmt: skip


def test_ubuntu_20_04s_reason_matches_the_hosts_python_floor():
    """The reason given for Ubuntu 20.04 (python3 3.8) holds against the oldest host Python the
    project checks its host code for (scripts/check-pythons)."""
    reasons = yaml.safe_load((ROOT / "roles/preflight/vars/main.yml").read_text())["__preflight_os_refusals"]
    floor = min(re.findall(r'"the OS\'s python3", "(3\.\d+)"', (ROOT / "scripts/check-pythons").read_text()),
                key=lambda v: tuple(map(int, v.split("."))))  # fmt: skip
    assert floor == "3.9"
    assert "python3 is 3.8" in reasons["Ubuntu 20.04"]
    assert f"need {floor} or later" in reasons["Ubuntu 20.04"]


def test_the_memory_plan_is_shown_and_max_batch_size_0_takes_what_fits(lab):
    """GPT-J-6B on one A100-80GB at the gateway's 2,048 tokens: the role's default 128 would not
    fit (refused: the wiring of fleet_memory_plan, tests/unit/test_memory.py for its figures); 0
    takes the largest that does, and the plan's line says so."""
    gptj = {"name": "gpt-j-6b", "family": "gptj", "source": {"url": lab["sources"]["gptj"], "revision": "main"},
            "weight_dtype": "fp32"}  # fmt: skip
    # GPT-J's fp32 checkouts and shards would need 57 GB of this machine's disk: the disk check is
    # another test's, and this one must not pass or fail with the machine's free space.
    rc, out = preflight(lab, "a100x1", fleet_model=gptj, preflight_disk_headroom=0.01)
    said = " ".join(out.split())
    assert rc != 0, said
    assert "fix: triton_model_repo_max_batch_size: 38 fits" in said, said
    assert "fleet_data_root=" not in said, said  # the memory plan's refusal alone
    rc, out = preflight(lab, "a100x1", fleet_model=gptj, triton_model_repo_max_batch_size=0,
                        preflight_disk_headroom=0.01)  # fmt: skip
    said = " ".join(out.split())
    assert rc == 0, said
    assert "GPU memory plan of node1: " in said
    assert "for max_batch_size 38 x beam 1 at 2,048 tokens" in said
    assert "(max_batch_size 0: the largest that fits)" in said


GPTJ = {"name": "gpt-j-6b", "family": "gptj", "source": {"revision": "main"}, "weight_dtype": "fp32"}


@pytest.mark.parametrize(
    ("case", "gpus", "overrides", "problems"),
    [
        ("tp does not divide head_num", "mixed8", {"model": "gptj", "fleet_gpu_devices": [0, 1, 2]},
         ["fleet_tensor_para_size=3, fleet_pipeline_para_size=1, fleet_gpu_devices=[0, 1, 2] for gpt-j-6b: "
          "tensor_para_size 3 does not divide head_num 16 (valid: 1, 2, 4, 8, 16)"]),
        ("head size FT has no kernel for", "a100x1", {"model": "narrow"},
         ["fleet_model narrow: head size 16 (768 hidden / 48 heads) has no kernel in FT's decoder attention (sizes "
          "32, 48, 64, 80, 96, 112, 128, 144, 160, 192, 224, 256; NVIDIA/FasterTransformer's "
          "decoder_masked_multihead_attention.cu): FT would load the model and answer garbage; fix: serve a model "
          "whose head size FT has kernels for"]),
        ("more GPUs than present", "a100x1", {"fleet_gpu_devices": [0, 1]},
         ["fleet_gpu_devices=[0, 1]: GPU index 1 does not exist (the host has 1 GPU(s): 0)"]),
        ("device index that does not exist", "mixed8", {"fleet_gpu_devices": [0, 9]},
         ["fleet_gpu_devices=[0, 9]: GPU index 9 does not exist (the host has 8 GPU(s): 0, 1, 2, 3, 4, 5, 6, 7)"]),
        ("too little disk and GPU memory", "a100x1", {"model": "huge"},
         ["fleet_data_root=", "huge needs",
          "GB (its weights, bin, fetch 240.0 GB, three times with git-lfs (the checkout and the objects of this "
          "revision and the previous); the fp32 shards", "GB, twice (this revision's and the previous)",
          "fix: free space or point fleet_data_root",
          "fleet_model huge: FT needs", "MiB per GPU at FT's peak (weights ",
          "more than 90% of the smallest assigned GPU (81,920 MiB: 73,728)"]),
        # 25.04's image from elsewhere (an archive: no image can be built for it here, the next case)
        ("driver too old for the container", "a100x1",
         {"fleet_triton_container_version": "25.04", "triton_image_archive": "/srv/images/tritonserver-ft-25.04.tar"},
         ["installed driver=535.104.05 with fleet_triton_container_version=25.04: driver 535.104.05 is too old "
          "for Triton 25.04 (CUDA 12.9): needs R575 or later"]),
        ("a release no image can be built for", "a100x1", {"fleet_triton_container_version": "25.04"},
         ["fleet_triton_container_version=25.04: no Triton+FT image can be built for it", "fix: one of 22.03, "]),
        ("missing token", "a100x1", {"token_required": True},
         ["fleet_hf_token is empty but fleet_model.source.token_required is true"]),
        ("bad model definition", "a100x1", {"fleet_model": {"name": "", "family": "gpt3", "source": {"url": "x"}}},
         ["fleet_model.name='': must be a non-empty string",
          "fleet_model.family='gpt3': unknown model family (valid: bloom, gpt, gptj, gptneox, llama)",
          "fleet_model.source.revision=None: must be a non-empty string"]),
        ("revision missing at the source", "a100x1", {"revision": "no-such-branch"},
         ["fleet_model.source=file://", "@ no-such-branch: cannot use its config.json", "no-such-branch"]),
        ("several problems at once", "mixed8",
         {"model": "gptj", "fleet_gpu_devices": [0, 1, 11], "token_required": True},
         ["GPU index 11 does not exist", "tensor_para_size 3 does not divide head_num 16", "fleet_hf_token is empty"]),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else None,
)  # fmt: skip
def test_bad_input_fails_before_any_change_naming_every_problem(lab, case, gpus, overrides, problems):
    if lab.get("installed") != gpus:  # install the gpus fact for this host: failing runs must change nothing
        assert preflight(lab, gpus)[0] == 0
        lab["installed"] = gpus
    overrides = dict(overrides)
    model = overrides.pop("model", None)
    token_required = overrides.pop("token_required", None)
    revision = overrides.pop("revision", None)
    if model:
        name = {"gptj": "gpt-j-6b", "huge": "huge", "narrow": "narrow"}[model]
        family = {"family": "gpt", "weight_dtype": "fp16"} if model == "narrow" else {}
        overrides["fleet_model"] = {**GPTJ, **family, "name": name,
                                    "source": {"url": lab["sources"][model], "revision": "main"}}  # fmt: skip
    if token_required is not None or revision:
        base = overrides.get("fleet_model") or {
            "name": "gpt2", "family": "gpt", "source": {"url": lab["sources"]["gpt2"], "revision": "main"}}  # fmt: skip
        source = {**base["source"], "revision": revision or base["source"]["revision"]}
        if token_required is not None:
            source["token_required"] = token_required
        overrides["fleet_model"] = {**base, "source": source}
    rc, out = preflight(lab, gpus, **overrides)
    assert rc != 0, out
    assert "preflight found" in out, out
    assert "nothing was changed" in out, out
    for problem in problems:
        assert problem in out, f"{case}: {problem!r} not in output:\n{out}"
    assert changed_count(out) == 0, out


@pytest.mark.docker
def test_unsupported_os_is_refused(lab):
    """A real Debian 11 host (a container built with debootstrap) is not a supported OS."""
    image = "ftfleet/debian11-systemd:latest"
    env = {**__import__("os").environ, "FTFLEET_SUITE": "bullseye", "FTFLEET_BASE_IMAGE": image}
    subprocess.run([str(ROOT / "scripts" / "build-base-image")], env=env, check=True)
    name = "ftfleet-preflight-bullseye"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    subprocess.run(["docker", "run", "-d", "--name", name, image, "sleep", "infinity"], check=True, capture_output=True)
    try:
        inventory = lab["root"] / "bullseye.yml"
        inventory.write_text(
            "all:\n  children:\n    gpu_hosts:\n      hosts:\n"
            f"        {name}:\n          ansible_connection: community.docker.docker\n"
        )
        extra = lab["root"] / "bullseye.json"
        gpt2 = {"name": "gpt2", "family": "gpt", "source": {"url": lab["sources"]["gpt2"], "revision": "main"}}
        keys = [{"name": "test", "key": "ftf-test-key-000000000001"}]
        extra.write_text(json.dumps({"preflight_config_cache": str(lab["root"] / "cache"), "fleet_model": gpt2,
                                     "fleet_api_keys": keys}))  # fmt: skip
        result = run_playbook("playbooks/preflight.yml", "-i", inventory, "-e", f"@{extra}")
        out = result.stdout + result.stderr
        assert result.returncode != 0, out
        assert "ansible_facts.distribution=Debian 11" in out
        assert "operating system not supported (supported: Debian 12, Ubuntu 22.04/24.04, RedHat 9" in out
        # The container has no NVIDIA GPU: that is reported in the same run.
        assert "ansible_local.gpus.count=0: the host has no NVIDIA GPU but serves fleet_model.name=gpt2" in out
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


# One host per case, all in one run (preflight stops every host at the same task, each listing its
# own problems): every class of bad input preflight must catch, with its message. Each host's
# overrides are its host vars, on the GPUs of a recording.
BAD_INVENTORIES = [
    ("duplicate-gpu", "mixed8", {"fleet_gpu_devices": [0, 0]},
     "fleet_gpu_devices=[0, 0]: index 0 is listed twice; fix: list each GPU of the host once"),
    ("negative-gpu", "a100x1", {"fleet_gpu_devices": [-1]}, "fleet_gpu_devices=[-1]: indices must be >= 0"),
    ("gpu-list-string", "a100x1", {"fleet_gpu_devices": "0,1"}, "fleet_gpu_devices='0,1': must be a list"),
    ("hopper-on-22.04", "h100x1", {},
     "fleet_ft_container_version=22.04: its CUDA 11.6 cannot build FT for GPU 0 (NVIDIA H100 80GB HBM3, SM 90; "
     "it builds SM 60, 61, 70, 75, 80, 86); fix: 22.10 or later"),
    ("http-equals-grpc", "a100x1", {"triton_server_http_port": 8001},
     "triton_server_http_port=8001, triton_server_grpc_port=8001, triton_server_metrics_port=8002: two of them"),
    ("port-out-of-range", "a100x1", {"triton_server_grpc_port": 70000},
     "triton_server_grpc_port=70000: out of range (valid: 1-65535)"),
    ("unknown-container", "a100x1", {"fleet_triton_container_version": "22.09"},
     "fleet_triton_container_version='22.09': unknown Triton container version '22.09'"),
    ("unquoted-container", "a100x1", {"fleet_ft_container_version": 22.1},
     "fleet_ft_container_version=22.1: container version 22.1 must be a string like '22.04'"),
    ("grouped-query-attention", "a100x1", {"model": "gqa"},
     "(llama): its checkpoint cannot be served: llama config.json has num_key_value_heads 8 != "
     "num_attention_heads 32"),
    ("heads-not-dividing-hidden", "a100x1", {"model": "oddheads"},
     "its checkpoint cannot be served: hidden size 4096 is not a multiple of the head count 15"),
    ("relative-data-root", "a100x1", {"fleet_data_root": "srv/ftfleet"},
     "fleet_data_root='srv/ftfleet': must be an absolute, normalized path"),
    ("model-name-with-slash", "a100x1", {"model_name": "openai/gpt2"},
     "fleet_model.name='openai/gpt2': must be letters, digits and ._-"),
    ("pipeline-size-0", "a100x1", {"fleet_pipeline_para_size": 0},
     "fleet_pipeline_para_size=0: must be a whole number >= 1"),
    ("engine", "a100x1", {"fleet_convert_engine": "fast"}, "fleet_convert_engine='fast': must be native or upstream"),
    ("quoted-boolean", "a100x1", {"fleet_require_gpus": "false"},
     "fleet_require_gpus='false': must be true or false"),
    ("fleet-typo", "a100x1", {"fleet_gpu_device": [0]},
     "fleet_gpu_device=[0]: no such fleet variable; fix: did you mean fleet_gpu_devices?"),
    ("role-typo", "a100x1", {"triton_server_http_prot": 8000},
     "triton_server_http_prot=8000: no such variable in role triton_server; fix: did you mean "
     "triton_server_http_port?"),
    ("bad-choice", "a100x1", {"docker_engine_source": "snap"},
     "docker_engine_source='snap': value of docker_engine_source must be one of: docker-ce, distro, got: snap"),
    ("bad-boolean", "a100x1", {"triton_server_mpirun": "maybe"},
     "triton_server_mpirun='maybe': argument 'triton_server_mpirun' is of type str and we were unable to convert"),
    ("converter-tp-differs", "a100x1", {"ft_convert_tp": 2},
     "ft_convert_tp=2 but fleet_tensor_para_size=1: shards and tuning must be made for the serving"),
    ("int8-with-fp32", "a100x1", {"triton_model_repo_int8_mode": 1, "data_type": "fp32"},
     "triton_model_repo_int8_mode=1 with fleet_model.data_type=fp32: int8 needs fp16 or bf16"),
    # FT df4a753 has no int8 kernels for SM 90: tritonserver aborted loading on an H100 (2026-12-07)
    ("int8-on-hopper", "h100x1", {"triton_model_repo_int8_mode": 1, "fleet_ft_container_version": "22.12",
                                  "fleet_triton_container_version": "22.12"},
     "triton_model_repo_int8_mode=1 on compute capability 9.0: FT's int8 kernels (int8_mode 1) run on SM 70 to 89 "
     "only"),
    ("both-batchings", "a100x1",
     {"triton_model_repo_dynamic_batching": True, "triton_model_repo_sequence_batching": True},
     "triton_model_repo_dynamic_batching and triton_model_repo_sequence_batching are both true"),
    ("sequence-batching-batch", "a100x1", {"triton_model_repo_sequence_batching": True},
     "triton_model_repo_sequence_batching needs triton_model_repo_max_batch_size 1, not 128"),
    ("bind-address", "a100x1", {"triton_server_bind_address": "localhost:8000"},
     "triton_server_bind_address='localhost:8000': not an IP address"),
    ("shm-size", "a100x1", {"triton_server_shm_size": "4 GB"}, "triton_server_shm_size='4 GB': not a size docker"),
    ("ulimit", "a100x1", {"triton_server_ulimits": ["memlock unlimited"]},
     "triton_server_ulimits: 'memlock unlimited' is not NAME=SOFT[:HARD]"),
    ("relative-checkpoint-dir", "a100x1", {"model_checkpoint_dir": "checkpoints/gpt2"},
     "model_checkpoint_dir='checkpoints/gpt2': must be an absolute path"),
    ("driver-branch", "a100x1", {"nvidia_driver_branch": "latest"},
     "nvidia_driver_branch='latest': must be a driver branch such as '535'"),
    ("token-with-space", "a100x1", {"fleet_hf_token": "hf_not a token"},
     "fleet_hf_token: must be one word without spaces or line breaks"),
    ("weight-dtype-for-family", "a100x1", {"model": "gptj", "weight_dtype": "fp16"},
     "fleet_model.weight_dtype='fp16': the gptj converter writes fp32 only"),
    ("weights-the-engine-cannot-read", "a100x1", {"model": "gptj", "fleet_convert_engine": "upstream"},
     "fleet_convert_engine=upstream: the gptj converter cannot read its weights (safetensors (single)); FT's GPT-J "
     "converter reads one unsharded pytorch_model.bin; fix: set fleet_convert_engine: native"),
    ("no-pytorch-weights", "a100x1", {"model": "tfonly"},
     "its checkpoint cannot be served: no weights that a converter reads (it has tf_model.h5)"),
    ("lfs-include-leaves-out-weights", "a100x1", {"model_checkpoint_lfs_include": "*.bin"},
     "model_checkpoint_lfs_include='*.bin' leaves out model.safetensors, which the converter reads"),
    ("images-do-not-fit", "a100x1", {"preflight_image_bytes": {"ft_image": 10**15, "triton_image": 10**15},
                                     "fleet_api_keys": [{"name": "t", "key": "ftf-test-key-000000000001"}]},
     "the images stage needs 2000000.0 GB for ft_image and triton_image (preflight_image_bytes)"),
    # decapoda-research/llama-7b-hf's files: config.json's ids are not its tokenizer's
    ("config-json-disagrees-with-tokenizer", "a100x1", {"model": "decapoda"},
     "config.json's eos_token_id is 1 but the tokenizer's eos token '</s>' is id 2 (FT's end_id: answers would "
     "never end at the end of text); fix: serve a checkpoint whose config.json agrees with its tokenizer"),
    # production's shape: Prometheus on its own host (mon below) cannot scrape a loopback port
    ("metrics-on-loopback", "a100x1", {"triton_server_metrics_bind_address": "127.0.0.1"},
     "triton_server_metrics_bind_address='127.0.0.1': Prometheus on mon scrapes triton on metrics-on-loopback, and "
     "a loopback address keeps it from other hosts"),
    ("meta-llama-directory", "a100x1", {"model": "metadir"},
     "Meta's original LLaMA weights (params.json, consolidated.*.pth), not a transformers checkpoint; fix: convert "
     "them with transformers' convert_llama_weights_to_hf.py"),
    ("no-such-directory", "a100x1", {"model": "nodir"}, "absent: no such directory on the controller"),
]  # fmt: skip


def test_bad_inventories_each_fail_before_any_change_naming_the_fix(lab):
    root = lab["root"]
    early_llama = {"tokenizer_config.json": {"tokenizer_class": "LLaMATokenizer", "bos_token": "", "eos_token": ""}}
    configs = {"gqa": ({**LLAMA_7B, "num_key_value_heads": 8}, None, None),
               "oddheads": ({**GPTJ_6B, "n_head": 15}, None, None),
               "tfonly": (GPT2, {"tf_model.h5": 498_000_000}, None),
               "decapoda": ({**LLAMA_7B, "bos_token_id": 0, "eos_token_id": 1}, None, early_llama)}  # fmt: skip
    sources = dict(lab["sources"])
    for name, (config, weights, files) in configs.items():
        if name not in sources:
            sources[name] = model_repo(root, name, config, weights=weights, files=files)
    # Checkpoints in a directory on the controller (fleet_model.source.path): Meta's own LLaMA
    # files, which transformers' converter must turn into a checkpoint first, and no directory.
    meta = root / "llama-7b-meta"
    meta.mkdir(exist_ok=True)
    (meta / "params.json").write_text("{}")
    (meta / "consolidated.00.pth").write_bytes(b"\0")
    sources["metadir"], sources["nodir"] = {"path": str(meta)}, {"path": str(root / "absent")}
    families = {"gpt2": "gpt", "gptj": "gptj", "gqa": "llama", "oddheads": "gptj", "tfonly": "gpt", "decapoda": "llama",
                "metadir": "llama", "nodir": "gpt"}  # fmt: skip
    hosts = {}
    for case, gpus, change, _ in BAD_INVENTORIES:
        overrides = dict(change)
        model = overrides.pop("model", "gpt2")
        source = sources[model] if isinstance(sources[model], dict) else {"url": sources[model], "revision": "main"}
        fleet_model = {"name": overrides.pop("model_name", model), "family": families[model], "source": source}
        for key in ("data_type", "weight_dtype"):
            if key in overrides:
                fleet_model[key] = overrides.pop(key)
        hosts[case] = {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
            "gpu_facts_fact_path": str(root / "facts" / case),
            "gpu_facts_nvidia_smi": str(RECORDINGS / gpus / "nvidia-smi"),
            "preflight_config_cache": str(root / "cache"), "fleet_data_root": str(root / "data"),
            "preflight_image_bytes": {"ft_image": 10**9, "triton_image": 10**9},
            "fleet_model": fleet_model, "fleet_gpu_devices": [0], **overrides,
        }  # fmt: skip
    inventory = root / "bad-inventories.yml"
    monitor = {"mon": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}
    inventory.write_text(json.dumps({"all": {"children": {"gpu_hosts": {"hosts": hosts},
                                                          "monitoring_hosts": {"hosts": monitor}}}}))  # fmt: skip
    # The gpus fact first, so that the failing run has nothing to install: it must change nothing.
    install = root / "install-facts.yml"
    install.write_text("- hosts: gpu_hosts\n  gather_facts: false\n  roles: [gpu_facts]\n")
    facts = run_playbook(install, "-i", inventory)
    assert facts.returncode == 0, facts.stdout[-3000:]

    result = run_playbook("playbooks/preflight.yml", "-i", inventory)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    # Only preflight's own report fails a host: no Jinja, template or Python error text.
    raw = re.search(r"Task failed: (?!Action failed: preflight found)|Error while resolving|Traceback|"
                    r"Finalization of task args|TemplateSyntaxError|is undefined", out)  # fmt: skip
    assert not raw, f"a raw error reached the user: {raw.group(0)!r}\n{out[-4000:]}"
    assert "hf_not a token" not in out
    blocks = dict(re.findall(r"fatal: \[([\w.-]+)\]: FAILED! =>(.*?)(?=fatal: \[|PLAY RECAP)", out, re.DOTALL))
    for case, _, _, problem in BAD_INVENTORIES:
        block = " ".join(blocks.get(case, "").split())
        assert "nothing was changed" in block, f"{case}: no preflight report:\n{out[-3000:]}"
        assert problem in block, f"{case}: {problem!r} not in:\n{block}"
        recap = re.search(rf"^{re.escape(case)}\s+: ok=\d+\s+changed=(\d+)", out, re.MULTILINE)
        assert recap, f"{case} missing from the recap"
        assert recap.group(1) == "0", f"{case} changed something"


def prod_preflight(tmp_path: Path, second_model: dict | None = None) -> tuple[int, str]:
    """inventories/prod's preflight, each host on a recording of the GPUs it names (1 and 8 A100,
    4 L40S), reached locally; only the model sources are swapped for local repositories holding
    the seed models' config.json at the same revision (the Hub is out of reach). second_model:
    variables for the L40S machine's second model (h2ogpt.gpu-l40s-04.example.com)."""
    recordings = {"gpu-a100-01.example.com": "a100x1", "gpu-a100-08.example.com": "mixed8",
                  "gpu-l40s-04.example.com": "l40sx4", "h2ogpt.gpu-l40s-04.example.com": "l40sx4"}  # fmt: skip
    seeds = {"kogpt": KOGPT_6B, "llama7b": LLAMA_7B, "h2ogpt": H2OGPT_6_9B}
    # The weights as the two repositories hold them: KoGPT's float16 branch one pytorch_model.bin,
    # llama-7b-hf 33 shards with an index (sizes as their git-lfs pointers give them, rounded).
    layouts = {"kogpt": {"pytorch_model.bin": 12_219_000_000},
               "llama7b": {"pytorch_model.bin.index.json": -1,
                           **{f"pytorch_model-{i:05d}-of-00033.bin": 405_000_000 for i in range(1, 34)}},
               # h2oGPT 6.9B: 13.7 GB of fp16 weights; the split into two shards is assumed here.
               "h2ogpt": {"pytorch_model.bin.index.json": -1, "pytorch_model-00001-of-00002.bin": 9_960_000_000,
                          "pytorch_model-00002-of-00002.bin": 3_760_000_000}}  # fmt: skip
    groups = {"kogpt": ["gpu-a100-01.example.com", "gpu-a100-08.example.com"],
              "llama7b": ["gpu-l40s-04.example.com"],
              "h2ogpt": ["h2ogpt.gpu-l40s-04.example.com"]}  # a second model on the L40S machine  # fmt: skip
    hosts = {}
    for group, members in groups.items():
        model = yaml.safe_load((ROOT / "inventories/prod/group_vars" / group / "fleet.yml").read_text())["fleet_model"]
        url = model_repo(tmp_path, group, seeds[group], branch=model["source"]["revision"], weights=layouts[group])
        for host in members:
            hosts[host] = {
                "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
                "gpu_facts_fact_path": str(tmp_path / "facts" / host),
                "gpu_facts_nvidia_smi": str(RECORDINGS / recordings[host] / "nvidia-smi"),
                "preflight_config_cache": str(tmp_path / "cache"), "fleet_data_root": str(tmp_path / "data"),
                # This machine's disk is not the hosts' disk: the disk check is not what is tried here.
                "preflight_disk_headroom": 0.001,
                "preflight_image_bytes": {"ft_image": 0, "triton_image": 0},
                "fleet_model": {**model, "source": {**model["source"], "url": url}},
            }  # fmt: skip
    inventory = ROOT / "inventories/prod"
    if second_model:  # over its host_vars, which outrank the overlay's host variables
        inventory = Path(shutil.copytree(inventory, tmp_path / "prod"))  # zz-: read after its other files
        (inventory / "host_vars/h2ogpt.gpu-l40s-04.example.com/zz-test.yml").write_text(json.dumps(second_model))
    overlay = tmp_path / "here.yml"
    overlay.write_text(json.dumps({"all": {"hosts": hosts}}))
    password = tmp_path / "vault-password"
    password.write_text("ftfleet-example\n")
    result = run_playbook("playbooks/preflight.yml", "-i", inventory, "-i", overlay,
                          "--vault-password-file", password)  # fmt: skip
    return result.returncode, " ".join((result.stdout + result.stderr).split())  # the messages, unwrapped


def test_the_example_production_inventory_passes_preflight_on_its_hardware(lab, tmp_path):
    """inventories/prod as shipped passes on its hardware's recordings (prod_preflight), with
    the L40S machine's two models on their GPUs."""
    rc, out = prod_preflight(tmp_path)
    assert rc == 0, out[-5000:]
    passed = re.findall(r"preflight passed: [^']*", out)
    assert sorted(passed) == [
        "preflight passed: h2ogpt (gptneox, tp 2 x pp 1 on GPUs 2,3; weights bin sharded, 13.72 GB)",
        "preflight passed: kogpt (gptj, tp 1 x pp 1 on GPUs 0; weights bin, 12.22 GB)",
        "preflight passed: kogpt (gptj, tp 8 x pp 1 on GPUs 0,1,2,3,4,5,6,7; weights bin, 12.22 GB)",
        "preflight passed: llama-7b (llama, tp 2 x pp 1 on GPUs 0,1; weights bin sharded, 13.37 GB)",
    ], out[-3000:]


def test_a_second_model_on_a_machine_is_refused_its_neighbours_gpus_and_ports(lab, tmp_path):
    """The L40S machine's second model placed badly: a GPU of LLaMA-7B's, LLaMA-7B's tritonserver
    port, a GPU the machine lacks and a tensor-parallel size its heads do not divide, in one
    preflight that changes nothing and names every problem, on both hosts of each clash."""
    rc, out = prod_preflight(tmp_path, {"fleet_gpu_devices": [1, 2, 4], "triton_server_http_port": 8100})
    assert rc != 0, out[-3000:]
    slot, machine = "h2ogpt.gpu-l40s-04.example.com", "gpu-l40s-04.example.com"
    said = [
        f"fleet_gpu_devices: GPU 1 of machine {machine} serves llama-7b too (host {machine})",
        f"fleet_gpu_devices: GPU 1 of machine {machine} serves h2ogpt too (host {slot})",
        f"triton_server_http_port=8100: host {machine} on machine {machine} has it too (triton_server_http_port)",
        f"triton_server_http_port=8100: host {slot} on machine {machine} has it too (triton_server_http_port)",
        "GPU index 4 does not exist (the host has 4 GPU(s): 0, 1, 2, 3)",
        "fleet_tensor_para_size=3, fleet_pipeline_para_size=1, fleet_gpu_devices=[1, 2, 4] for h2ogpt",
    ]
    missing = [words for words in said if words not in out]
    assert not missing, (missing, out[-6000:])
    assert f"problem(s) on {slot}; nothing was changed" in out
    assert f"problem(s) on {machine}; nothing" in out


@pytest.mark.parametrize(
    ("second_model", "words"),
    [
        ({"fleet_tensor_para_size": 4},
         "tensor_para_size 4 x pipeline_para_size 1 = 4 GPUs, but 2 are assigned"),
        # h2oGPT at tp 2 (6,935 MiB of fp16 weights a GPU, and its batch) against a tenth of an L40S's 46,068 MiB
        ({"preflight_gpu_memory_fraction": 0.1},
         "more than 10% of the smallest assigned GPU (46,068 MiB: 4,606); a full batch at the longest lengths"),
    ],
    ids=["tp-not-its-gpus", "too-little-memory"],
)  # fmt: skip
def test_a_second_model_on_a_machine_is_checked_on_its_own_gpus(lab, tmp_path, second_model, words):
    """The per-model checks hold for a machine's second model on the GPUs it is given: tp x pp
    equal to their count, its weights within their memory; the machine's first model passes."""
    rc, out = prod_preflight(tmp_path, second_model)
    assert rc != 0, out[-3000:]
    assert words in out, out[-6000:]
    assert "problem(s) on h2ogpt.gpu-l40s-04.example.com; nothing was changed" in out
    assert "problem(s) on gpu-l40s-04.example.com;" not in out


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({}, None),
        ({"load_balancer_gateway_ca": ""}, "gpu-a100-01.example.com (kogpt) serves HTTPS (gateway_tls_cert) but "
                                           "load_balancer_gateway_ca is empty"),
        ({"load_balancer_tls_certificate": "", "load_balancer_tls_key": "", "load_balancer_gateway_ca": "",
          "gateway_tls_cert": "", "gateway_tls_key": ""},
         "load_balancer_bind_address=0.0.0.0: plain HTTP on a network carries every API key"),
        ({"load_balancer_tls_certificate": "", "load_balancer_tls_key": "", "load_balancer_gateway_ca": "",
          "gateway_tls_cert": "", "gateway_tls_key": "", "load_balancer_allow_plaintext": True}, None),
        ({"load_balancer_vip": "10.0.0.100/24", "keepalived_address": "10.0.0.11"},
         "load_balancer_vip is set but lb_hosts has 1 member(s)"),
        ({"load_balancer_vip": "10.0.0.100/24", "keepalived_address": "10.0.0.11"},
         "load_balancer_tls_certificate names lb-01.example.com, not the virtual address 10.0.0.100"),
    ],
    ids=["tls-both-hops", "no-gateway-ca", "plain-on-a-network", "plain-on-purpose", "vip-alone", "vip-not-named"],
)  # fmt: skip
def test_the_load_balancers_preflight_refuses_keys_in_clear(tmp_path, extra, words):
    """inventories/prod's load balancer (HTTPS, its key in the example vault, HTTPS gateways)
    passes the lb_hosts preflight play; taking TLS away from one hop is refused with the fix,
    unless load_balancer_allow_plaintext says so. Nothing is contacted: the play reads the inventory."""
    password = tmp_path / "vault-password"
    password.write_text("ftfleet-example\n")
    result = run_playbook("playbooks/preflight.yml", "-i", "inventories/prod", "--limit", "lb_hosts",
                          "--vault-password-file", password, "-e", json.dumps(extra))  # fmt: skip
    out = " ".join((result.stdout + result.stderr).split())
    if words is None:
        assert result.returncode == 0, out[-3000:]
        # each role's validate (its include, its argument spec, its problems), role fleet_shared's argument
        # spec (their dependency), the check of both, monitoring reach
        assert "lb-01.example.com : ok=9 changed=0 unreachable=0 failed=0" in out, out[-3000:]
    else:
        assert result.returncode != 0, out[-3000:]
        assert words in out, out[-3000:]
        assert "BEGIN PRIVATE KEY" not in out  # the key from the vault is never shown


def test_a_checkpoint_in_a_directory_on_the_controller_is_read_there(lab, tmp_path):
    """fleet_model.source.path: preflight reads config.json, the weights' sizes and the tokenizer
    from the directory as from git (a sparse 1 GB file stands for the weights); it refuses a
    path mixed with git fields with the fix."""
    directory = tmp_path / "gpt2"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(GPT2))
    with open(directory / "model.safetensors", "wb") as weights:
        weights.truncate(1_000_000_000)
    model = {"name": "gpt2", "family": "gpt", "source": {"path": str(directory)}}
    if lab.get("installed") != "a100x1":  # the gpus fact first: the runs below must change nothing
        assert preflight(lab, "a100x1")[0] == 0
        lab["installed"] = "a100x1"
    rc, out = preflight(lab, "a100x1", fleet_model=model)
    assert rc == 0, out
    said = " ".join(out.split())
    assert "preflight passed: gpt2 (gpt, tp 1 x pp 1 on GPUs 0; weights safetensors, 1.0 GB)" in said
    assert changed_count(out) == 0

    # Refusals (Meta's own files, no directory) are in the bad inventories' one run (above).
    rc, out = preflight(lab, "a100x1", fleet_model={**model, "source": {"path": str(directory), "revision": "main"}})
    assert rc != 0, out
    assert "fleet_model.source has path and revision" in " ".join(out.split()), out
    assert changed_count(out) == 0


def test_a_slim_gptj_archive_is_checked_from_the_inventory(lab, tmp_path):
    """fleet_model.source.archive: nothing is downloaded on the controller; the shape is GPT-J-6B's
    unless source.config says otherwise, the tokenizer's end token is checked against it, the
    weights are sized from the shape, and the upstream engine is refused with the fix."""
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"id": 50256, "content": "<|endoftext|>"}]}))
    (tokenizer / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    # GPT-J-6B's width in 2 layers: its disk need fits this machine's disk.
    source = {"archive": "https://the-eye.example/GPT-J-6B/step_383500_slim.tar.zstd", "sha256": "ab" * 32,
              "tokenizer": str(tokenizer), "config": {"n_layer": 2}}  # fmt: skip
    model = {"name": "gptj-6b", "family": "gptj", "source": source}
    if lab.get("installed") != "a100x1":
        assert preflight(lab, "a100x1")[0] == 0
        lab["installed"] = "a100x1"
    # max_batch_size 64: the GPU memory plan of 128 requests of 2,048 tokens (the role's default)
    # needs 97,804 MiB of one A100-80GB, 86,975 of it the context phase's (its layers one at a time)
    rc, out = preflight(lab, "a100x1", fleet_model=model, triton_model_repo_max_batch_size=64)
    assert rc == 0, out
    said = " ".join(out.split())
    # 2 layers of 201 M parameters, the embedding and the head of 206 M each, in bfloat16
    assert "preflight passed: gptj-6b (gptj, tp 1 x pp 1 on GPUs 0; weights jax-slim sharded, 1.63 GB)" in said, said
    assert changed_count(out) == 0

    bad_eos = {**source, "config": {"n_layer": 2, "eos_token_id": 7}}
    rc, out = preflight(lab, "a100x1", fleet_model={**model, "source": bad_eos}, fleet_convert_engine="upstream")
    assert rc != 0, out
    said = " ".join(out.split())
    assert "FT's converter of a slim GPT-J (gptj_ckpt_convert.py) imports JAX" in said, said
    assert "eos_token_id" in said, said
    assert "50256" in said, said
    assert changed_count(out) == 0
