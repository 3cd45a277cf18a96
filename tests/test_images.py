"""The image roles build what the seeds build by hand. For KoGPT on one A100 (SM 80) with
container 22.04, the seeds run, in clones of NVIDIA/FasterTransformer and
triton-inference-server/fastertransformer_backend:

    docker build -f docker/Dockerfile.torch --build-arg DOCKER_VERSION=22.04 \\
                 --build-arg SM=80 --build-arg BUILD_MULTI_GPU=ON .
    docker build -f docker/Dockerfile --build-arg TRITON_VERSION=22.04 .

The roles' build specs (the facts their spec.yml computes before container_image builds) must
carry the same repositories, Dockerfiles and build args; the images scenario then proves the
args reach a real build."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT, run_playbook

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    gpu_facts_fact_path: {facts}
    gpu_facts_nvidia_smi: {smi}
    fleet_model: {model}
  roles:
    - gpu_facts
  tasks:
    - ansible.builtin.include_role: {{name: ft_image, tasks_from: spec}}
    - ansible.builtin.include_role: {{name: triton_image, tasks_from: spec}}
    - ansible.builtin.copy:
        content: "{{{{ {{'ft': ft_image_spec, 'triton': triton_image_spec}} | to_json }}}}"
        dest: {out}
        mode: "0644"
"""


@pytest.mark.parametrize(
    ("family", "ft_repo", "backend_repo"),
    [
        ("gptj", "https://github.com/NVIDIA/FasterTransformer.git",
         "https://github.com/triton-inference-server/fastertransformer_backend.git"),
        ("llama", "https://github.com/void-main/FasterTransformer.git",
         "https://github.com/void-main/fastertransformer_backend.git"),
    ],
)  # fmt: skip
def test_builds_match_the_seeds_manual_commands(playbook, tmp_path, family, ft_repo, backend_repo):
    out = tmp_path / "specs.json"
    play = playbook(
        PLAY.format(
            facts=tmp_path / "facts.d",
            smi=ROOT / "tests" / "fixtures" / "gpus" / "a100x1" / "nvidia-smi",
            model=json.dumps({"name": "kogpt", "family": family}),
            out=out,
        )
    )
    result = run_playbook(play, "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}")
    assert result.returncode == 0, result.stdout + result.stderr
    specs = json.loads(out.read_text())
    assert specs["ft"] == {
        "repo_url": ft_repo,
        "ref": "main",
        "dockerfile": "docker/Dockerfile.torch",
        "build_args": {"DOCKER_VERSION": "22.04", "SM": "80", "BUILD_MULTI_GPU": "ON"},
    }
    assert specs["triton"] == {
        "repo_url": backend_repo,
        "ref": "main",
        "dockerfile": "docker/Dockerfile",
        "build_args": {"TRITON_VERSION": "22.04"},
    }
