"""The image roles build what the seeds build by hand, or the project's recipe of it. For KoGPT on
one A100 (SM 80) with container 22.04, the seeds run, in clones of NVIDIA/FasterTransformer and
triton-inference-server/fastertransformer_backend:

    docker build -f docker/Dockerfile.torch --build-arg DOCKER_VERSION=22.04 \\
                 --build-arg SM=80 --build-arg BUILD_MULTI_GPU=ON .
    docker build -f docker/Dockerfile --build-arg TRITON_VERSION=22.04 .

The roles' build specs (the facts their spec.yml computes before container_image builds) must
carry the same repositories, Dockerfiles and build args without the recipe, and the recipe's
pins, Dockerfiles and files with it; the images scenario then proves the args and the recipe's
files reach a real build. No NGC image can be pulled here: what each release's build runs inside
one (the CUDA key fix, apt, the pinned packages, FT's CMake) is checked as the recipe computes it,
on the Python those images have, and the pins are resolved against the package index."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from unittest.mock import ANY

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
    ft_image_recipe: {recipe}
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
RECIPE_PINS = json.loads((RECIPE / "recipe.json").read_text())


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
    """Without the recipe (triton_image_recipe, ft_image_recipe: false), each image is upstream's build."""
    specs = specs_for(playbook, tmp_path, family, recipe=False)
    assert specs["ft"] == {
        "repo_url": ft_repo,
        "ref": "main",
        "dockerfile": "docker/Dockerfile.torch",
        "build_args": {"DOCKER_VERSION": "22.04", "SM": "80", "BUILD_MULTI_GPU": "ON"},
        "context_files": [],
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
    pins = RECIPE_PINS["flavours"][flavour]
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
    assert specs["ft"] == {
        "repo_url": pins["ft"]["url"],
        "ref": pins["ft"]["commit"],
        "dockerfile": "ftfleet/Dockerfile.ft",
        "build_args": {"DOCKER_VERSION": "22.04", "SM": sm, "BUILD_MULTI_GPU": "ON", "FLAVOUR": flavour},
        "context_files": [{"src": str(RECIPE / name), "dest": f"ftfleet/{name}"}
                          for name in ("Dockerfile.ft", "ftb_build.py", "ftb_edits.py", "recipe.json")],
    }  # fmt: skip
    # Every build arg a role passes is one its Dockerfile declares, and it runs the recipe with each.
    for image, dockerfile, command in (("triton", "Dockerfile", "image"), ("ft", "Dockerfile.ft", "ft-image")):
        text = (RECIPE / dockerfile).read_text()
        for name in specs[image]["build_args"]:
            assert f"ARG {name}" in text, (dockerfile, name)
            assert "${" + name + "}" in text, (dockerfile, name)
        assert f"ftfleet/ftb_build.py {command}" in text, dockerfile


RELEASES = RECIPE_PINS["releases"]
PYTHONS = Path("/root/.pyenv/versions")


def image_python(version: str) -> str:
    """An interpreter of the Python NGC's image of that release has (pyenv's here), else this one."""
    found = sorted(PYTHONS.glob(f"{version}.*/bin/python3"))
    return str(found[-1]) if found else sys.executable


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_each_release_builds_the_ft_image_with_its_key_fix_and_pinned_packages(release):
    """What the FT image's build runs in NGC's PyTorch image of each release the recipe lists,
    as ftb_build.py plan-ft computes it, run by that image's Python (3.8 for 22.03-23.03): NVIDIA's
    new CUDA repository key first where the release's image carries the old one (22.03-22.05,
    server issue 4407), then apt, then pip with every package pinned (the image's own torch and
    numpy kept), and FT's gpt_gemm built from FT at the recipe's pin with cutlass at its own.
    A refused release says why."""
    python = RELEASES[release]["python"]
    done = subprocess.run([image_python(python), str(RECIPE / "ftb_build.py"), "plan-ft", "--release", release,
                           "--sm", "80,90"], capture_output=True, text=True, check=False)  # fmt: skip
    if "refused" in RELEASES[release]:
        assert done.returncode == 1, done.stdout
        assert RELEASES[release]["refused"] in done.stderr
        return
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout)
    keyed = release in ("22.03", "22.04", "22.05")
    assert steps["cuda_key"] is keyed
    commands = [argv[:2] for argv in steps["prepare"]]
    key = [["apt-key", "del"], ["apt-key", "adv"]]
    assert commands == [*(key if keyed else []), ["apt-get", "update"], ["apt-get", "install"], [ANY, "-m"]]
    if keyed:
        assert steps["prepare"][1][-1].endswith("/3bf863cc.pub")  # the key NVIDIA signs with since April 2022
    pip = steps["prepare"][-1]
    assert pip[2:5] == ["pip", "install", "--no-cache-dir"], pip
    pins = pip[5:]
    assert all(re.fullmatch(r"[a-z0-9.-]+==[0-9][0-9a-z.]*", pin) for pin in pins), pins
    names = {pin.split("==")[0] for pin in pins}
    assert {"transformers", "tokenizers", "sentencepiece", "safetensors", "cmake"} <= names, names
    assert not names & {"torch", "numpy"}, "the image's own torch and numpy are kept"
    assert steps["ft"] == RECIPE_PINS["flavours"]["nvidia"]["ft"]
    assert {"-DSM=80,90", "-DGIT_AUTOCLONE_CUTLASS=OFF", "-DBUILD_PYT=OFF"} <= set(steps["cmake"])
    assert steps["target"] == "gpt_gemm"


@pytest.mark.parametrize("python", ["3.8", "3.10", "3.12"])
def test_the_recipes_pins_are_a_whole_consistent_set(python, tmp_path):
    """For each Python the recipe pins for, pip resolves the pinned packages (torch aside: only
    the serving image's --torch installs it) to exactly the pins: nothing a package needs is left
    to the index's newest release, and no two pins conflict."""
    wanted = {**RECIPE_PINS["python_dependencies"][python], **RECIPE_PINS["python_packages"][python]}
    wanted.pop("torch")
    wanted.update(RECIPE_PINS["build_packages"])
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed", "--report", str(report),
         "--python-version", python, "--only-binary=:all:", "--implementation", "cp", "--platform",
         "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64",
         "--target", str(tmp_path / "target"), *(f"{name}=={version}" for name, version in wanted.items())],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    resolved = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert resolved == wanted
