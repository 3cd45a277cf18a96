"""The backend's build recipe (roles/triton_image/files/ftb): its pins, the releases it builds or
refuses, the SM values and CMake arguments it computes, and its source edits on small trees that
hold the pinned sources' lines (the edits on the real trees ran on the GPU machine: docs/gpu/)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from ftdomain.ft.cuda import TRITON_DRIVERS

ROOT = Path(__file__).resolve().parents[2]
RECIPE_DIR = ROOT / "roles" / "triton_image" / "files" / "ftb"
sys.path.insert(0, str(RECIPE_DIR))  # as a script run there finds ftb_edits.py beside it
_spec = importlib.util.spec_from_file_location("ftb_build", RECIPE_DIR / "ftb_build.py")
ftb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ftb)
RECIPE = ftb.load_recipe()


def test_every_pin_is_a_whole_commit_of_a_github_repository():
    for flavour, parts in RECIPE["flavours"].items():
        assert set(parts) == {"backend", "ft", "cutlass"}, flavour
        for part, pin in parts.items():
            assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+\.git", pin["url"]), (flavour, part)
            assert re.fullmatch(r"[0-9a-f]{40}", pin["commit"]), (flavour, part)
    assert RECIPE["flavours"]["void-main"]["ft"]["url"].startswith("https://github.com/void-main/")


def test_every_release_has_its_pythons_packages():
    for version, release in RECIPE["releases"].items():
        assert re.fullmatch(r"\d{2}\.\d{2}", version)
        packages = RECIPE["python_packages"][release["python"]]
        assert {"numpy", "transformers", "tokenizers", "torch"} <= set(packages), version
        assert packages["numpy"].startswith("1."), "the r24.10 stub misreads BYTES tensors under numpy 2"


def test_the_releases_known_to_preflight_are_the_recipes():
    """Each NGC release the project knows the CUDA of (cuda_compat) is built or refused with a
    reason, and none beyond them."""
    assert set(RECIPE["releases"]) == set(TRITON_DRIVERS)


def test_a_refused_release_says_why_and_names_the_buildable():
    known = ftb.versions(RECIPE)
    assert "25.04" in known["refused"]
    assert "24.10" in known["buildable"]
    with pytest.raises(ftb.RecipeError, match=r"Triton 25\.04: r25\.04's core"):
        ftb.plan(RECIPE, "25.04")
    with pytest.raises(ftb.RecipeError, match=r"'21\.09': not a release this recipe builds; it builds 22\.03, "):
        ftb.plan(RECIPE, "21.09")


def test_the_plan_for_the_default_release():
    steps = ftb.plan(RECIPE, "22.04-py3", "nvidia", sm="86,80", cuda="11.6", multi_gpu=True)
    assert (steps["triton_version"], steps["python"], steps["cuda_key"]) == ("22.04", "3.8", True)
    assert steps["sm"] == "80,86"
    assert steps["sources"]["core"] == {"url": RECIPE["triton_repos"]["core"], "branch": "r22.04"}
    assert steps["sources"]["FasterTransformer"]["commit"] == RECIPE["flavours"]["nvidia"]["ft"]["commit"]
    assert {"-DSM=80,86", "-DBUILD_MULTI_GPU=ON", "-DCXX_STD=14"} <= set(steps["cmake"])
    assert "-DUSE_NVTX=OFF" not in steps["cmake"]
    assert not any("CCCL" in edit for edit in steps["edits"])  # CUDA 11.6 keeps cub::Max and cub::Sum


def test_cuda_13_builds_cxx17_and_refuses_old_sms():
    steps = ftb.plan(RECIPE, "24.10", "void-main", sm="90", cuda="13.0")
    assert {"-DCXX_STD=17", "-DUSE_NVTX=OFF"} <= set(steps["cmake"])
    assert steps["sources"]["fastertransformer_backend"]["url"].startswith("https://github.com/void-main/")
    assert any("CCCL" in edit for edit in steps["edits"])
    with pytest.raises(ftb.RecipeError, match=r"CUDA 13\.0 builds SM 75 and newer only"):
        ftb.plan(RECIPE, "24.10", "nvidia", sm="70,90", cuda="13.0")


@pytest.mark.parametrize("sm", ["", "8.0", "sm_80", "80;x"])
def test_a_bad_sm_value_is_named(sm):
    with pytest.raises(ftb.RecipeError, match="--sm"):
        ftb.sm_list(sm)


def test_an_unknown_flavour_is_named():
    with pytest.raises(ftb.RecipeError, match="--flavour 'mine': one of nvidia, void-main"):
        ftb.plan(RECIPE, "24.10", "mine")


# GptNeoX::setOutputTensors at df4a753 (and void-main's e770ddf), the lines the edits change.
NEOX_PATH = "src/fastertransformer/models/gptneox/GptNeoX.cc"
NEOX_GATHER = """\
        param.beams                = transposed_output_ids_buf_;
        param.max_sequence_lengths = sequence_lengths_;
        param.output_ids                      = output_tensors->at("output_ids").getPtr<int>();
        invokeGatherTree(param);
        invokeCudaD2DcpyConvert(
            sequence_lengths, sequence_lengths_, output_tensors->at("sequence_length").size(), stream_);
        sync_check_cuda_error();
"""


def _trees(tmp_path: Path) -> dict:
    """Small trees with the lines of the pinned sources that the edits change."""
    ft, backend, common = tmp_path / "FasterTransformer", tmp_path / "fastertransformer_backend", tmp_path / "common"
    files = {
        ft / "CMakeLists.txt": "add_subdirectory(examples)\nadd_subdirectory(tests)\n\n",
        ft / "src/fastertransformer/kernels/decoder_masked_multihead_attention_utils.h": "#include <stdint.h>\n",
        ft / "src/fastertransformer/utils/cublasMMWrapper.h": "#include <map>\n",
        ft / "src/fastertransformer/utils/gemm_test/gemm_func.cc": "           matmulTileName[tile],\n",
        ft / "src/fastertransformer/kernels/moe_kernels.cu": "cub::Sum sum;\nReduce(x, cub::Max());\n",
        ft / "src/fastertransformer/kernels/longformer_kernels.cu": "Reduce(a, cub::Max()); Reduce(b, cub::Sum());\n",
        ft / "src/fastertransformer/utils/CMakeLists.txt": "target_link_libraries(nvtx_utils PUBLIC -lnvToolsExt)\n",
        backend / "CMakeLists.txt": "PUBLIC\n  USE_TRITONSERVER_DATATYPE\n  BUILD_MULTI_GPU)\nPRIVATE cxx_std_14)\n",
        ft / NEOX_PATH: NEOX_GATHER,
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    common.mkdir()
    return {"FasterTransformer": ft, "fastertransformer_backend": backend, "common": common}


def test_the_edits_for_cuda_13_apply_once(tmp_path):
    trees = _trees(tmp_path)
    done = ftb.apply_edits(trees, "13.0")
    assert len(done) == 13
    moe = (trees["FasterTransformer"] / "src/fastertransformer/kernels/moe_kernels.cu").read_text()
    assert "cub::" not in moe
    assert moe == "::cuda::std::plus<> sum;\nReduce(x, ::cuda::maximum<>());\n"
    backend = (trees["fastertransformer_backend"] / "CMakeLists.txt").read_text()
    assert backend == "PUBLIC\n  USE_TRITONSERVER_DATATYPE)\nPRIVATE cxx_std_17)\n"
    assert ftb.apply_edits(trees, "13.0") == []  # a tree edited before is left as it is
    header = trees["FasterTransformer"] / "src/fastertransformer/kernels/decoder_masked_multihead_attention_utils.h"
    assert header.read_text().count("<cstdio>") == 1


def test_streamed_gpt_neox_gathers_on_the_outputs_copy_of_its_lengths(tmp_path):
    # Every CUDA: the gather adds the final step to the lengths it is given; on the model's own,
    # a streamed (decoupled) GPT-NeoX moved them at every step.
    trees = _trees(tmp_path)
    ftb.apply_edits(trees, "12.6")
    lines = [line.strip() for line in (trees["FasterTransformer"] / NEOX_PATH).read_text().splitlines()]
    copy = lines.index("invokeCudaD2DcpyConvert(  // ftfleet: the output's copy, gathered below")
    assert "param.max_sequence_lengths = sequence_lengths_;" not in lines
    assert lines.index("param.max_sequence_lengths = reinterpret_cast<int*>(sequence_lengths);") == copy + 2
    gather = next(i for i, line in enumerate(lines) if line.startswith("invokeGatherTree(param);"))
    assert gather > copy
    assert lines[gather + 1] == "sync_check_cuda_error();"  # no copy after it any more


def test_cuda_12_keeps_cub_and_cxx14(tmp_path):
    trees = _trees(tmp_path)
    ftb.apply_edits(trees, "12.6")
    assert "cub::Max()" in (trees["FasterTransformer"] / "src/fastertransformer/kernels/moe_kernels.cu").read_text()
    assert "cxx_std_14)" in (trees["fastertransformer_backend"] / "CMakeLists.txt").read_text()


def test_a_required_edit_whose_text_moved_stops_the_build(tmp_path):
    trees = _trees(tmp_path)
    (trees["FasterTransformer"] / "src/fastertransformer/utils/cublasMMWrapper.h").write_text("#include <vector>\n")
    with pytest.raises(
        ftb.RecipeError, match=r"edit of FasterTransformer/src/fastertransformer/utils/cublasMMWrapper\.h"
    ):
        ftb.apply_edits(trees, "12.6")


def test_cuda_13_drops_the_kernel_library_architectures_it_cannot_build(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text('PROPERTIES CUDA_ARCHITECTURES "53;60-real;75-real;90-real")\n')
    assert ftb.kernel_architectures(tmp_path, "12.6") == []
    changed = ftb.kernel_architectures(tmp_path, "13.0")
    assert changed == ["backend/CMakeLists.txt: CUDA_ARCHITECTURES 53;60-real;75-real;90-real -> 75-real;90-real"]
    assert 'CUDA_ARCHITECTURES "75-real;90-real"' in (tmp_path / "CMakeLists.txt").read_text()


def test_sources_come_from_a_local_folder_at_their_pins(tmp_path):
    sources = tmp_path / "sources"
    for part in ftb.PARTS:
        (sources / part).mkdir(parents=True)
        (sources / part / "marker").write_text(part)
    (sources / "FasterTransformer" / "3rdparty").mkdir()
    steps = ftb.plan(RECIPE, "24.10")
    trees = ftb.fetch(steps["sources"], str(sources), tmp_path / "work")
    ft = trees["FasterTransformer"]
    assert (ft / "3rdparty" / "cutlass" / "marker").read_text() == "cutlass"
    assert (ft.parent / "repo-core-src" / "marker").read_text() == "core"  # where FT's CMake looks
    stamp = json.loads((tmp_path / "work" / "src" / "core.pin").read_text())
    assert stamp == {"url": RECIPE["triton_repos"]["core"], "branch": "r24.10"}
    (sources / "core" / "marker").write_text("changed")
    again = ftb.fetch(steps["sources"], str(sources), tmp_path / "work")  # same pins: the trees are kept
    assert (again["core"] / "marker").read_text() == "core"


def test_a_missing_part_is_named(tmp_path):
    with pytest.raises(
        ftb.RecipeError, match=r"neither .*/fastertransformer_backend nor .*fastertransformer_backend\.tar\.xz"
    ):
        ftb.fetch(ftb.plan(RECIPE, "24.10")["sources"], str(tmp_path), tmp_path / "work")


def test_the_command_line_lists_the_versions(capsys):
    assert ftb.main(["versions"]) == 0
    assert "24.10" in json.loads(capsys.readouterr().out)["buildable"]
    assert ftb.main(["plan", "--triton-version", "25.04"]) == 1
    assert "error: Triton 25.04" in capsys.readouterr().err


def test_the_recipes_flavours_are_the_family_registrys():
    from ftdomain.ft.families import FAMILIES, FLAVOURS  # noqa: PLC0415

    assert set(RECIPE["flavours"]) == set(FLAVOURS) == {f.flavour for f in FAMILIES.values()}
    for name, flavour in FLAVOURS.items():
        assert RECIPE["flavours"][name]["ft"]["url"] == flavour["ft_repo"]
        assert RECIPE["flavours"][name]["backend"]["url"] == flavour["backend_repo"]


@pytest.mark.parametrize(("version", "key", "numpy"), [("22.04", True, "1.24.4"), ("24.10", False, "1.26.4")])
def test_the_image_step_installs_what_the_release_needs_then_builds(monkeypatch, version, key, numpy):
    ran, built = [], []
    monkeypatch.setattr(ftb, "_run", lambda argv, **_kw: ran.append(argv))
    monkeypatch.setattr(ftb, "build", lambda args, recipe: built.append(args.backend_src))
    monkeypatch.setattr(ftb, "image_python", lambda steps: steps["python"])  # the image's, not this machine's
    assert (
        ftb.main(["image", "--triton-version", version, "--sm", "80", "--backend-src", "/ctx", "--work", "/tmp/w"]) == 0
    )
    assert [argv[:2] == ["apt-key", "adv"] for argv in ran].count(True) == (1 if key else 0)
    pip = next(argv for argv in ran if "pip" in argv)
    assert f"numpy=={numpy}" in pip
    assert "transformers==4.46.3" in pip
    assert "cmake==3.31.6" in pip
    assert "huggingface-hub==0.36.2" in pip  # what transformers brings is pinned too
    assert not any(arg.startswith("torch==") for arg in pip)  # only with --torch
    assert built == ["/ctx"]
    assert ran[-1][:2] == ["apt-get", "clean"]


@pytest.mark.parametrize(("version", "key"), [("22.03", True), ("23.04", False)])
def test_the_ft_image_step_installs_what_the_release_needs_then_builds_gpt_gemm(monkeypatch, version, key):
    ran, built = [], []
    monkeypatch.setattr(ftb, "_run", lambda argv, **_kw: ran.append(argv))
    monkeypatch.setattr(ftb, "build_ft", lambda args, recipe: built.append(args.ft_src))
    monkeypatch.setattr(ftb, "image_python", lambda steps: steps["python"])
    argv = ["ft-image", "--release", version, "--sm", "80", "--ft-src", "/workspace/FasterTransformer"]
    assert ftb.main(argv) == 0
    assert ran[: 2 if key else 0] == ([["apt-key", "del", "7fa2af80"], ["apt-key", "adv", "--fetch-keys",
                                                                        ftb.CUDA_KEY_URL]] if key else [])  # fmt: skip
    assert ran[2 if key else 0] == ["apt-get", "update"]
    pip = next(argv for argv in ran if "pip" in argv)
    assert "transformers==4.46.3" in pip
    assert not any(arg.startswith(("torch==", "numpy==")) for arg in pip)  # the PyTorch image's own
    assert built == ["/workspace/FasterTransformer"]


def test_the_image_python_chooses_the_pins_and_a_python_without_pins_is_named(capsys):
    assert ftb.python_pins(RECIPE, "3.8", drop=("torch",))[0].startswith("certifi==")
    with pytest.raises(ftb.RecipeError, match=r"Python 3\.9: the recipe pins packages for Python 3\.8, 3\.10, 3\.12"):
        ftb.python_pins(RECIPE, "3.9")
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert ftb.image_python({"python": "3.8", "triton_version": "22.04"}) == running
    assert f"the image's Python is {running}, not the 3.8 the recipe lists for 22.04" in capsys.readouterr().err


def test_the_ft_build_makes_gpt_gemm_in_the_context_and_keeps_only_its_binaries(monkeypatch, tmp_path):
    """build_ft on a tree with FT's layout: cutlass linked at its pin into 3rdparty, CMake run in
    build/ with the plan's arguments, the objects removed and the record written; no gpt_gemm made
    is an error."""
    tree = tmp_path / "FasterTransformer"
    (tree / "src" / "fastertransformer").mkdir(parents=True)
    (tree / "3rdparty" / "cutlass").mkdir(parents=True)  # the submodule's empty folder
    sources = tmp_path / "sources" / "cutlass"
    sources.mkdir(parents=True)
    (sources / "marker").write_text("cutlass")
    ran = []

    def run(argv, **kw):
        ran.append(argv)
        if "--build" in argv:
            (kw["cwd"] / "bin").mkdir()
            (kw["cwd"] / "bin" / "gpt_gemm").write_text("")
            (kw["cwd"] / "CMakeFiles").mkdir()

    monkeypatch.setattr(ftb, "_run", run)
    monkeypatch.setattr(ftb, "cuda_of_nvcc", lambda: "11.6")
    edited = []  # the edits themselves have their tests above, on trees with the pinned lines
    monkeypatch.setattr(ftb, "apply_edits", lambda trees, cuda: edited.append((sorted(trees), cuda)) or [])
    args = argparse.Namespace(
        triton_version="22.04", flavour="nvidia", sm="80", multi_gpu=True, ft_src=str(tree),
        sources=str(tmp_path / "sources"), work=str(tmp_path / "work"), jobs=2, cmake_arg=[],
    )  # fmt: skip
    record = ftb.build_ft(args, RECIPE)
    assert (tree / "3rdparty" / "cutlass" / "marker").read_text() == "cutlass"
    assert edited == [(["FasterTransformer"], "11.6")]
    assert ran[0][:2] == ["cmake", str(tree)]
    assert "-DBUILD_MULTI_GPU=ON" in ran[0]
    assert ran[1][:5] == ["cmake", "--build", ".", "--target", "gpt_gemm"]
    assert sorted(p.name for p in (tree / "build").iterdir()) == ["bin", "ftfleet-build.json"]
    assert record["built"] == str(tree / "build" / "bin" / "gpt_gemm")
    monkeypatch.setattr(ftb, "_run", lambda argv, **kw: None)
    (tree / "build" / "bin" / "gpt_gemm").unlink()
    with pytest.raises(ftb.RecipeError, match=r"the build made no .*/build/bin/gpt_gemm"):
        ftb.build_ft(args, RECIPE)
    args.ft_src = str(tmp_path)
    with pytest.raises(ftb.RecipeError, match="not FasterTransformer's sources"):
        ftb.build_ft(args, RECIPE)
