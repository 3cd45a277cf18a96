"""The FasterTransformer backend recipe's source edits (ftb_build.py applies them): what each CUDA
needs of FT, the backend and Triton's repositories at the recipe's pins, each edit checked (one
whose text is found neither before nor after stops the build), and the kernel architectures of
Triton's backend repository that CUDA 13 no longer compiles.

Python 3.8 and the standard library only (NGC's images from 22.03 to 23.03 have Python 3.8).
"""

from __future__ import annotations

import re
from collections import namedtuple
from pathlib import Path

# CUDA 13 compiles SM 75 and newer only.
CUDA13_OLDEST_SM = 75


class RecipeError(Exception):
    pass


def _major(cuda: str) -> int:
    return int(str(cuda).split(".")[0])


# An edit of a source tree: in `part`, the file (or glob) `pattern`, `old` becomes `new` where the
# CUDA in use is of major version `since` or later (0: always), because `why`. A required edit's
# text must be found (or its result: a tree edited before) or the build stops, so that a new pin
# whose text moved fails here rather than in the compiler; an optional one applies where the
# text exists (Triton's repositories differ from release to release).
Edit = namedtuple("Edit", "part pattern old new since why required", defaults=(True,))
_FT_KERNELS = "src/fastertransformer/kernels"
_GPTNEOX = "src/fastertransformer/models/gptneox/GptNeoX.cc"
EDITS = (
    Edit(
        "FasterTransformer",
        "CMakeLists.txt",
        "\nadd_subdirectory(tests)\n",
        "\n# add_subdirectory(tests): left out by ftfleet (googletest from the network at configure time)\n",
        0,
        "FT's unit tests fetch googletest from GitHub when configured; the serving build needs none of them",
    ),
    Edit(
        "FasterTransformer",
        f"{_FT_KERNELS}/decoder_masked_multihead_attention_utils.h",
        "#include <stdint.h>\n",
        "#include <stdint.h>\n#include <cstdio>  // printf in device code (ftfleet)\n",
        0,
        "its device code calls printf, which CUDA 13's headers no longer bring",
    ),
    Edit(
        "FasterTransformer",
        "src/fastertransformer/utils/cublasMMWrapper.h",
        "#include <map>\n",
        "#include <array>  // std::array (ftfleet)\n#include <map>\n",
        0,
        "GCC 13's <map> no longer brings std::array",
    ),
    Edit(
        "FasterTransformer",
        "src/fastertransformer/utils/gemm_test/gemm_func.cc",
        "           matmulTileName[tile],\n",
        "           tile >= 0 && tile < int(sizeof(matmulTileName) / sizeof(matmulTileName[0]))"
        ' ? matmulTileName[tile] : "?",\n',
        0,
        "cuBLASLt 12 and 13 name tiles past the table's end: gpt_gemm printed a wild pointer (SIGSEGV on SM 90)",
    ),
    Edit(
        "FasterTransformer", "src/**/*.cu", "cub::Max()", "::cuda::maximum<>()", 13, "CUDA 13's CCCL removed cub::Max"
    ),
    Edit(
        "FasterTransformer", "src/**/*.cu", "cub::Sum()", "::cuda::std::plus<>()", 13, "CUDA 13's CCCL removed cub::Sum"
    ),
    Edit(
        "FasterTransformer",
        f"{_FT_KERNELS}/moe_kernels.cu",
        "cub::Sum sum;",
        "::cuda::std::plus<> sum;",
        13,
        "CUDA 13's CCCL removed cub::Sum",
    ),
    Edit(
        "FasterTransformer",
        "src/fastertransformer/utils/CMakeLists.txt",
        "target_link_libraries(nvtx_utils PUBLIC -lnvToolsExt)",
        "# (left out by ftfleet: CUDA 13 has NVTX 3 only, header-only)",
        13,
        "CUDA 13 ships no nvToolsExt library",
    ),
    # GPT-NeoX's setOutputTensors ran the gather on the model's own sequence lengths, and the
    # gather adds the final step to them: called once per step when streaming (decoupled), it
    # pushed them one further each step, and beam search, the repetition penalty, stop words and
    # the answered sequence_length went wrong (found on an H200 through the gateway: a decoupled
    # GPT-NeoX's beams and penalised tokens differed from the whole model's, and its
    # sequence_length ran past its output_ids). ParallelGpt gathers on the output's copy: so here.
    Edit(
        "FasterTransformer",
        _GPTNEOX,
        "        param.max_sequence_lengths = sequence_lengths_;\n",
        "        invokeCudaD2DcpyConvert(  // ftfleet: the output's copy, gathered below\n"
        '            sequence_lengths, sequence_lengths_, output_tensors->at("sequence_length").size(), stream_);\n'
        "        param.max_sequence_lengths = reinterpret_cast<int*>(sequence_lengths);\n",
        0,
        "streamed GPT-NeoX moved its own sequence lengths at every step (the gather ran on them)",
    ),
    Edit(
        "FasterTransformer",
        _GPTNEOX,
        "        invokeGatherTree(param);\n        invokeCudaD2DcpyConvert(\n"
        '            sequence_lengths, sequence_lengths_, output_tensors->at("sequence_length").size(), stream_);\n',
        "        invokeGatherTree(param);  // ftfleet: sequence_length was copied before the gather\n",
        0,
        "streamed GPT-NeoX moved its own sequence lengths at every step (the copy after the gather)",
    ),
    Edit(
        "fastertransformer_backend",
        "CMakeLists.txt",
        "  USE_TRITONSERVER_DATATYPE\n  BUILD_MULTI_GPU)",
        "  USE_TRITONSERVER_DATATYPE)",
        0,
        "BUILD_MULTI_GPU was defined for the backend always, and for FT only when asked: a single-GPU build then "
        "disagreed with FT on the layout of NcclParam and MpiComm (the block under if (BUILD_MULTI_GPU) still "
        "defines it)",
    ),
    Edit(
        "fastertransformer_backend",
        "CMakeLists.txt",
        "cxx_std_14)",
        "cxx_std_17)",
        13,
        "CUDA 13's CCCL (cub, libcu++) needs C++17",
    ),
    Edit(
        "common",
        "src/CMakeLists.txt",
        "\nadd_subdirectory(test)\n",
        "\n# add_subdirectory(test): left out by ftfleet (googletest from the network at configure time)\n",
        0,
        "Triton common's tests fetch googletest from GitHub when configured; the backend needs none of them",
        False,
    ),
)


def edits_for(cuda: str) -> list:
    return [edit for edit in EDITS if _major(cuda) >= edit.since]


def _files(root: Path, pattern: str) -> list:
    if any(ch in pattern for ch in "*?["):
        return sorted(p for p in root.glob(pattern) if p.is_file())
    return [root / pattern]


def apply_edits(trees: dict, cuda: str) -> list:
    """Apply the edits for this CUDA to the trees ({part: path}); returns what changed. Raises
    RecipeError when an edit finds neither its old nor its new text."""
    done = []
    for part, pattern, old, new, _since, why, required in edits_for(cuda):
        if part not in trees:
            continue
        files = _files(Path(trees[part]), pattern)
        hit = False
        for path in files:
            if not path.is_file():
                continue
            text = path.read_text()
            if new in text:  # edited before (an insertion's result holds its old text too)
                hit = True
            elif old in text:
                path.write_text(text.replace(old, new))
                done.append(f"{part}/{path.relative_to(trees[part])}: {why}")
                hit = True
        if not hit and required:
            raise RecipeError(f"edit of {part}/{pattern} found neither its text nor its result ({why}): {old!r}")
    return done


def kernel_architectures(backend_tree: Path, cuda: str) -> list:
    """Triton's backend repository builds a small kernel library for a fixed list of
    architectures; CUDA 13 refuses those below SM 75: they are left out there."""
    if _major(cuda) < 13:
        return []
    path = Path(backend_tree) / "CMakeLists.txt"
    text = path.read_text()
    changed = []

    def keep(match):
        archs = match[1].split(";")
        kept = [a for a in archs if int(re.match(r"\d+", a)[0]) >= CUDA13_OLDEST_SM]
        if kept != archs:
            changed.append(f"backend/CMakeLists.txt: CUDA_ARCHITECTURES {match[1]} -> {';'.join(kept)}")
        return f'CUDA_ARCHITECTURES "{";".join(kept)}"'

    path.write_text(re.sub(r'CUDA_ARCHITECTURES "([^"]*)"', keep, text))
    return changed
