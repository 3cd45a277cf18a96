"""ft_convert's upstream engine installs what void-main's LLaMA converter imports beyond the FT
image (`from bfloat16 import bfloat16`), with the image's own Python and pip, and runs the
converter with it first on its path.

NGC's pytorch image is out of reach: the stand-in FT image is Debian 12 with Python 3.11, numpy,
pip and a C++ compiler, and, for the image the FT build makes, transformers installed with pip
(FT's Dockerfile.torch brings it with NeMo[nlp]). The role's converter-deps tasks run against
each: without transformers the run fails naming the import line; with it, bfloat16 is installed
into the tools directory once (1.2.0's wheel for Python 3.11; the 22.04 image's 3.8 takes 1.1 from
source, tests/unit/test_converter_imports.py and docs/models.md) and the second run installs
nothing. Then, run as the role runs the converter (its PYTHONPATH prefix and mount), the
converter's own import lines and its bf16 conversion (`param.astype(bfloat16).tofile(...)`, for
each tensor it writes whole) give the same bytes as the project's converter (ftnative) on a tiny
LLaMA."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_playbook

from ftdomain.ft.commands import ft_converter_imports

pytestmark = pytest.mark.docker
BASE = os.environ.get("FTFLEET_BASE_IMAGE", "ftfleet/debian12-systemd:latest")
BARE, NEMO = "ftfleet-test/ft-image-bare:converter-deps", "ftfleet-test/ft-image-nemo:converter-deps"

# What the NGC image has that a converter's build needs: Python, numpy, pip, setuptools, a compiler.
DOCKERFILE = f"""\
FROM {BASE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
        python3-numpy python3-pip python3-setuptools python3-dev g++ > /dev/null && rm -rf /var/lib/apt/lists/*
"""
# transformers as NeMo[nlp] brings it into FT's image (the last release for the 22.04 image's Python 3.8).
NEMO_DOCKERFILE = f"""\
FROM {BARE}
ARG PIP_INDEX_URL=https://pypi.org/simple
COPY pip-cert.pem /tmp/pip-cert.pem
RUN PIP_CERT=/tmp/pip-cert.pem pip install --quiet --no-cache-dir --break-system-packages \\
        --index-url "$PIP_INDEX_URL" transformers==4.46.3 && rm /tmp/pip-cert.pem
"""

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    fleet_model: {model}
    ft_convert_image: {image}
    ft_convert_tools_dir: {tools}
    ft_convert_pip_index_url: {index}
  tasks:
    - name: Install what the converter imports
      ansible.builtin.include_role:
        name: ft_convert
        tasks_from: converter-deps
        public: true

    - name: Run the converter's import lines and its bf16 conversion, as the role runs the converter
      ansible.builtin.command:
        argv: >-
          {{{{ ['docker', 'run', '--rm', '--volume', __ft_convert_deps_dir ~ ':/ftfleet/converter-deps:ro',
               '--volume', '{work}:/work:ro', ft_convert_image]
             + __ft_convert_with_path + ['/ftfleet/converter-deps', 'python3', '/work/bf16_convert.py'] }}}}
      register: __converted
      changed_when: false

    - name: Keep what the image's converter wrote
      ansible.builtin.copy:
        content: "{{{{ __converted.stdout }}}}"
        dest: {out}
        mode: "0644"
"""

# What void-main's converter does for the tensors it writes whole: its import lines (from the
# family's registry), then `param.astype(bfloat16).tofile(...)` on the checkpoint's float32 values.
CONVERT = """\
import hashlib, json, sys
imports = json.load(open("/work/imports.json"))
for line in imports:
    exec(line)
import numpy as np
from safetensors.numpy import load_file
weights = load_file("/work/checkpoint/model.safetensors")
names = json.load(open("/work/names.json"))
out = {ft: hashlib.sha256(weights[hf].astype(np.float32).astype(bfloat16).tobytes()).hexdigest()
       for ft, hf in names.items()}
print(json.dumps({"dtype": str(np.dtype(bfloat16)), "sha256": out, "from": sys.modules["bfloat16"].__file__}))
"""
# Tensors the LLaMA converter writes without a transpose or a split (tp 1).
WHOLE = {
    "model.wte.weight.bin": "model.embed_tokens.weight",
    "model.final_layernorm.weight.bin": "model.norm.weight",
    "model.lm_head.weight.bin": "lm_head.weight",
    "model.layers.0.input_layernorm.weight.bin": "model.layers.0.input_layernorm.weight",
    "model.layers.1.post_attention_layernorm.weight.bin": "model.layers.1.post_attention_layernorm.weight",
}


def sh(*argv: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    context = tmp_path_factory.mktemp("ft-image")
    (context / "Dockerfile").write_text(DOCKERFILE)
    built = sh("docker", "build", "-q", "-t", BARE, str(context))
    assert built.returncode == 0, built.stderr[-3000:]
    (context / "Dockerfile").write_text(NEMO_DOCKERFILE)
    shutil.copy(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt", context / "pip-cert.pem")
    index = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
    built = sh("docker", "build", "-q", "--build-arg", f"PIP_INDEX_URL={index}", "-t", NEMO, str(context))
    assert built.returncode == 0, built.stderr[-3000:]
    return BARE, NEMO


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A tiny LLaMA (fp32 safetensors) and the project's bf16 shards of it."""
    work = tmp_path_factory.mktemp("work")
    made = sh(sys.executable, str(ROOT / "scripts" / "make-tiny-model"), "--family", "llama",
              "--export", str(work / "checkpoint"))  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    converted = sh(sys.executable, "-m", "ftnative.convert", "-i", str(work / "checkpoint"), "-o", str(work / "ours"),
                   "--family", "llama", "--tp", "1", "--weight-dtype", "bf16", "-q", cwd=ROOT)  # fmt: skip
    assert converted.returncode == 0, converted.stderr[-3000:]
    (work / "bf16_convert.py").write_text(CONVERT)
    (work / "names.json").write_text(json.dumps(WHOLE))
    (work / "imports.json").write_text(json.dumps([i["statement"] for i in ft_converter_imports("llama")]))
    return work


def deps_play(playbook, work: Path, tools: Path, image: str, out: Path) -> subprocess.CompletedProcess[str]:
    model = {"name": "tiny-llama", "family": "llama", "data_type": "bf16",
             "source": {"url": "file:///x", "revision": "main"}}  # fmt: skip
    pack = sh(sys.executable, str(ROOT / "roles" / "ft_convert" / "files" / "pack-tools"), str(ROOT),
              str(tools / "ftnative.zip"))  # fmt: skip
    assert pack.returncode == 0, pack.stderr
    play = playbook(PLAY.format(model=json.dumps(model), image=image, tools=tools, work=work, out=out,
                                index=json.dumps(os.environ.get("PIP_INDEX_URL", ""))))  # fmt: skip
    return run_playbook(play, "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}")


def recap_changed(output: str) -> int:
    line = next(line for line in output.splitlines() if line.startswith("localhost") and "changed=" in line)
    return int(line.split("changed=")[1].split()[0])


def test_llama_converter_imports_installed_once_and_convert_as_ours(playbook, images, tiny_llama, tmp_path) -> None:
    bare, nemo = images
    tools, out = tmp_path / "tools", tmp_path / "converted.json"

    # An FT image without transformers: the run stops, naming the converter's import line.
    refused = deps_play(playbook, tiny_llama, tools, bare, out)
    assert refused.returncode != 0, refused.stdout[-3000:]
    assert "from transformers import LlamaForCausalLM" in refused.stdout, refused.stdout[-3000:]
    assert not list(tools.glob("converter-deps/*/ftfleet-converter-deps.json")), "no manifest for a failed install"

    # With it: bfloat16 installed with the image's pip (the wheel its Python takes), then used.
    first = deps_play(playbook, tiny_llama, tools, nemo, out)
    assert first.returncode == 0, first.stdout[-4000:]
    manifests = list(tools.glob("converter-deps/*/ftfleet-converter-deps.json"))
    assert len(manifests) == 1, manifests
    manifest = json.loads(manifests[0].read_text())
    assert manifest["installed"] == ["bfloat16==1.2.0"], manifest  # Python 3.11: 1.2.0's wheel
    assert manifest["present"] == ["from transformers import LlamaForCausalLM"], manifest
    assert list(manifests[0].parent.glob("bfloat16*.so")), sorted(p.name for p in manifests[0].parent.iterdir())
    assert recap_changed(first.stdout) >= 1

    # The image's converter, run as the role runs it, writes our bytes.
    seen = json.loads(out.read_text())
    assert seen["dtype"] == "bfloat16", seen
    assert seen["from"].startswith("/ftfleet/converter-deps/bfloat16"), seen
    ours = {name: hashlib.sha256((tiny_llama / "ours" / "1-gpu" / name).read_bytes()).hexdigest() for name in WHOLE}
    assert seen["sha256"] == ours

    # Installed once per image and imports: the second run installs nothing.
    again = deps_play(playbook, tiny_llama, tools, nemo, out)
    assert again.returncode == 0, again.stdout[-3000:]
    assert recap_changed(again.stdout) == 0, again.stdout[-3000:]
    assert "Install what the converter imports, with the image's Python and pip" in again.stdout
    print(f"converter deps: {manifest}")
