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
    triton_image_recipe: {recipe}
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


RECIPE = ROOT / "roles" / "triton_image" / "files" / "ftb"


def specs_for(playbook, tmp_path, family: str, recipe: bool, gpus: str = "a100x1") -> dict:
    out = tmp_path / "specs.json"
    play = playbook(
        PLAY.format(
            facts=tmp_path / "facts.d",
            smi=ROOT / "tests" / "fixtures" / "gpus" / gpus / "nvidia-smi",
            model=json.dumps({"name": "kogpt", "family": family}),
            recipe=json.dumps(recipe),
            out=out,
        )
    )
    result = run_playbook(play, "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text())


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
    """Without the recipe (triton_image_recipe: false), the Triton image is upstream's build."""
    specs = specs_for(playbook, tmp_path, family, recipe=False)
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
        "context_files": [],
    }


@pytest.mark.parametrize(
    "case",
    [("gptj", "nvidia", "a100x1", "80"), ("llama", "void-main", "l40sx4", "89")],
    ids=lambda case: case[0],
)
def test_the_triton_image_is_built_by_the_recipe_for_the_hosts_gpus(playbook, tmp_path, case):
    """By default the recipe's Dockerfile in the backend's sources at the recipe's commit, with
    the recipe's files added, for every distinct SM of the host's GPUs (as the FT image)."""
    family, flavour, gpus, sm = case
    pins = json.loads((RECIPE / "recipe.json").read_text())["flavours"][flavour]
    specs = specs_for(playbook, tmp_path, family, recipe=True, gpus=gpus)
    assert specs["triton"] == {
        "repo_url": pins["backend"]["url"],
        "ref": pins["backend"]["commit"],
        "dockerfile": "ftfleet/Dockerfile",
        "build_args": {"TRITON_VERSION": "22.04", "SM": sm, "FLAVOUR": flavour, "BUILD_MULTI_GPU": "ON",
                       "TORCH": "OFF"},
        "context_files": [{"src": str(RECIPE / name), "dest": f"ftfleet/{name}"}
                          for name in ("Dockerfile", "ftb_build.py", "ftb_edits.py", "recipe.json")],
    }  # fmt: skip
    assert specs["ft"]["build_args"]["SM"] == sm
    # Every build arg the role passes is one the Dockerfile declares, and it runs the recipe with each.
    dockerfile = (RECIPE / "Dockerfile").read_text()
    for name in specs["triton"]["build_args"]:
        assert f"ARG {name}" in dockerfile, name
        assert "${" + name + "}" in dockerfile, name
    assert "ftfleet/ftb_build.py image" in dockerfile
