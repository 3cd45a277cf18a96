#!/usr/bin/env python3
"""ftfleet's one recipe for the FasterTransformer Triton backend (libtriton_fastertransformer.so).

The serving image's build (roles/triton_image: its Dockerfile runs `image` inside NGC's
tritonserver image) and the GPU tier (scripts/ft-gpu-check stack, on a GPU machine with local
sources) run this same file, with the pins of recipe.json beside it:

    ftb_build.py versions                        the Triton releases it builds, and those it refuses
    ftb_build.py plan --triton-version 24.10 [--flavour nvidia|void-main (ft_families.py)] [--sm 80,90] [--cuda 12.6]
    ftb_build.py build --triton-version 24.10 --sm 90 [--flavour F] [--multi-gpu] [--sources DIR]
                       [--work DIR] [--prefix DIR] [--jobs N] [--rapidjson-dir DIR]
    ftb_build.py image --triton-version 24.10 --sm 80,90 [--flavour F] [--multi-gpu] [--torch] [--backend-src DIR]
    ftb_build.py edit-ft DIR [--cuda 13.0]       only the source edits, on an FT tree (GPU tier's driver)
    ftb_build.py plan-ft --release 22.04 [--flavour F] [--sm 80]   the FT image's build, computed only
    ftb_build.py ft-image --release 22.04 --sm 80 --ft-src DIR [--flavour F] [--multi-gpu]

`build` takes the pinned sources from their git remotes, or from --sources DIR (a directory or a
.tar.xz per part: fastertransformer_backend, FasterTransformer, cutlass, core, common, backend),
applies the edits the CUDA in use needs (EDITS, in ftb_edits.py beside it, each checked: an edit whose text is not
found stops the build), configures the backend's CMake with every FetchContent source local
(FETCHCONTENT_FULLY_DISCONNECTED), builds the backend target for the SM values given, and
installs the backend and FT's library into PREFIX/backends/fastertransformer. `image` is `build`
inside NGC's image: the CUDA repository key where the release needs it, the build's apt packages,
and the Python packages the tokenizing models need, pinned for the image's Python.

`ft-image` is the FT image's build (roles/ft_image: Dockerfile.ft runs it inside NGC's PyTorch
image, in FasterTransformer's sources at the recipe's pin): the same key fix and pinned packages
(the image's own torch and numpy kept), cutlass at its pin, and FT's gpt_gemm for the SM values
given, which GEMM tuning runs; the upstream converters run from the same tree.

Python 3.8 and the standard library only: NGC's images from 22.03 to 23.03 have Python 3.8.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from ftb_edits import CUDA13_OLDEST_SM, RecipeError, _major, apply_edits, edits_for, kernel_architectures

HERE = Path(__file__).resolve().parent
RECIPE = HERE / "recipe.json"
PARTS = ("fastertransformer_backend", "FasterTransformer", "cutlass", "core", "common", "backend")
# NVIDIA's CUDA repository signing key changed in April 2022; NGC images made before carry the old
# one and fail at apt-get update (triton-inference-server/server issue 4407).
CUDA_KEY_URL = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2004/x86_64/3bf863cc.pub"
APT_PACKAGES = ("git", "rapidjson-dev", "libz-dev", "python3-dev", "xz-utils")
FT_APT_PACKAGES = ("git", "xz-utils")
# What NGC's PyTorch image brings and the FT image keeps: its torch is built for its CUDA.
PYTORCH_IMAGE_OWN = ("torch", "numpy")


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} ftb_build: {text}", file=sys.stderr, flush=True)


def load_recipe(path: Path = RECIPE) -> dict:
    return json.loads(path.read_text())


def versions(recipe: dict) -> dict:
    """{"buildable": [...], "refused": {version: reason}}"""
    releases = recipe["releases"]
    return {
        "buildable": [v for v, r in releases.items() if "refused" not in r],
        "refused": {v: r["refused"] for v, r in releases.items() if "refused" in r},
    }


def release(recipe: dict, triton_version: str) -> dict:
    version = str(triton_version).strip()
    if version.endswith("-py3"):
        version = version[: -len("-py3")]
    known = versions(recipe)
    if version in known["refused"]:
        raise RecipeError(f"Triton {version}: {known['refused'][version]}")
    if version not in recipe["releases"]:
        raise RecipeError(
            f"Triton {triton_version!r}: not a release this recipe builds; it builds {', '.join(known['buildable'])}"
        )
    return dict(recipe["releases"][version], version=version)


def sm_list(sm: str) -> list:
    values = [s for s in re.split(r"[,; ]+", str(sm).strip()) if s]
    if not values or not all(re.fullmatch(r"\d{2,3}", s) for s in values):
        raise RecipeError(f"--sm {sm!r}: give SM values such as 80 or 80,90 (a compute capability without the dot)")
    return sorted(set(values), key=int)


def cuda_of_nvcc(nvcc: str = "nvcc") -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise RecipeError(f"no CUDA compiler ({nvcc}): {err}; the build needs nvcc (NGC's images have it)") from err
    match = re.search(r"release (\d+)\.(\d+)", out)
    if not match:
        raise RecipeError(f"cannot read the CUDA version from `{nvcc} --version`: {out.strip()[:200]}")
    return f"{match[1]}.{match[2]}"


def _checked(recipe: dict, triton_version: str, flavour: str, sm: str, cuda: str) -> tuple:
    """(the release, the flavour's pins, the SM values), each checked."""
    if flavour not in recipe["flavours"]:
        raise RecipeError(f"--flavour {flavour!r}: one of {', '.join(recipe['flavours'])}")
    rel = release(recipe, triton_version)
    sms = sm_list(sm)
    if cuda and _major(cuda) >= 13 and any(int(s) < CUDA13_OLDEST_SM for s in sms):
        raise RecipeError(f"--sm {sm}: CUDA {cuda} builds SM {CUDA13_OLDEST_SM} and newer only")
    return rel, recipe["flavours"][flavour], sms


def _common(rel: dict, flavour: str, sms: list, cuda: str, multi_gpu: bool) -> tuple:
    """(what both builds' plans say of the release and the target, CMake's arguments both pass):
    FT's kernels for the SM values (FT matches each as a substring of SM), C++17 from CUDA 13."""
    cxx = "17" if cuda and _major(cuda) >= 13 else "14"
    said = {"triton_version": rel["version"], "flavour": flavour, "python": rel["python"],
            "cuda_key": bool(rel.get("cuda_key")), "sm": ",".join(sms), "multi_gpu": multi_gpu,
            "cuda": cuda}  # fmt: skip
    cmake = [
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DSM={','.join(sms)}",
        f"-DBUILD_MULTI_GPU={'ON' if multi_gpu else 'OFF'}",
        "-DENABLE_FP8=OFF",
        f"-DCXX_STD={cxx}",
        *([] if cxx == "14" else ["-DUSE_NVTX=OFF"]),
        # CMake 4 keeps FindCUDA (which FT and the backend use) only under the old policy.
        "-DCMAKE_POLICY_DEFAULT_CMP0146=OLD",
        "-DCMAKE_POLICY_VERSION_MINIMUM=3.5",
    ]
    return said, cmake


def python_pins(recipe: dict, python: str, drop: tuple = ()) -> list:
    """name==version for every package an image's Python is given (python_packages) and everything
    they bring (python_dependencies), less those named in drop."""
    if python not in recipe["python_packages"]:
        known = ", ".join(recipe["python_packages"])
        raise RecipeError(f"Python {python}: the recipe pins packages for Python {known}")
    wanted = {**recipe["python_dependencies"].get(python, {}), **recipe["python_packages"][python]}
    return [f"{name}=={version}" for name, version in sorted(wanted.items()) if name not in drop]


def image_python(steps: dict) -> str:
    """The Python running the build (the image's), which chooses the pins; said when the release's
    table names another."""
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if running != steps["python"]:
        listed = f"the {steps['python']} the recipe lists for {steps['triton_version']}"
        say(f"the image's Python is {running}, not {listed}")
    return running


def prepare(recipe: dict, steps: dict, apt: tuple, pins: list) -> list:
    """The commands that ready NGC's image for a build, in order: the CUDA repository's key where
    the release needs it, apt, the build's cmake and the pinned Python packages."""
    key = [["apt-key", "del", "7fa2af80"], ["apt-key", "adv", "--fetch-keys", CUDA_KEY_URL]]
    build = [f"{name}=={version}" for name, version in recipe["build_packages"].items()]
    return [
        *(key if steps["cuda_key"] else []),
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", *apt],
        # cmake from PyPI: the images' own cmake is older than the FetchContent options the build uses.
        [sys.executable, "-m", "pip", "install", "--no-cache-dir", *build, *pins],
    ]


def plan(
    recipe: dict,
    triton_version: str,
    flavour: str = "nvidia",
    *,
    sm: str = "80",
    cuda: str = "",
    multi_gpu: bool = False,
    prefix: str = "/opt/tritonserver",
) -> dict:
    """Everything a build does, computed only: the pins, the edits and CMake's arguments."""
    rel, pins, sms = _checked(recipe, triton_version, flavour, sm, cuda)
    branch = "r" + rel["version"]
    sources = {
        "fastertransformer_backend": {"url": pins["backend"]["url"], "commit": pins["backend"]["commit"]},
        "FasterTransformer": {"url": pins["ft"]["url"], "commit": pins["ft"]["commit"]},
        "cutlass": {"url": pins["cutlass"]["url"], "commit": pins["cutlass"]["commit"]},
        **{name: {"url": url, "branch": branch} for name, url in recipe["triton_repos"].items()},
    }
    said, cmake = _common(rel, flavour, sms, cuda, multi_gpu)
    return {
        **said,
        "python_packages": recipe["python_packages"][rel["python"]],
        "sources": sources,
        "edits": [f"{e.part}/{e.pattern}: {e.why}" for e in edits_for(cuda or "0")],
        "cmake": [
            *cmake,
            f"-DCMAKE_INSTALL_PREFIX={prefix}",
            f"-DTRITON_COMMON_REPO_TAG={branch}",
            f"-DTRITON_CORE_REPO_TAG={branch}",
            f"-DTRITON_BACKEND_REPO_TAG={branch}",
            "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
            # RapidJSON 1.1.0 (Debian's and Ubuntu's rapidjson-dev) derives from std::iterator, which
            # C++17 deprecates; GCC 12 and later warn, and Triton's common and backend build with -Werror.
            "-DCMAKE_CXX_FLAGS=-Wno-error=deprecated-declarations",
        ],
        "install": f"{prefix}/backends/fastertransformer",
    }


def _run(argv: list, log: Path | None = None, cwd: Path | None = None, env: dict | None = None) -> None:
    say("$ " + " ".join(str(a) for a in argv) + (f"  (log {log})" if log else ""))
    if log is None:
        subprocess.run(argv, cwd=cwd, env=env, check=True)
        return
    with log.open("w") as out:
        done = subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        lines = log.read_text(errors="replace").splitlines()
        errors = [line for line in lines if re.search(r"\berror\b", line, re.IGNORECASE)][:15]
        raise RecipeError(
            f"{argv[0]} failed (exit {done.returncode}); log {log}; its errors:\n" + "\n".join(errors or lines[-30:])
        )


def _local(name: str, pin: dict, sources_dir: str, src: Path) -> None:
    """A part from the operator's folder: NAME/ or NAME.tar.xz, unpacked to src/NAME."""
    local, archive = Path(sources_dir) / name, Path(sources_dir) / f"{name}.tar.xz"
    if local.is_dir():
        shutil.copytree(local, src / name, symlinks=True)
    elif archive.is_file():
        with tarfile.open(archive) as tar:
            tar.extractall(src)  # the operator's own archive of the pinned source
        if not (src / name).is_dir():
            raise RecipeError(f"{archive} must unpack to {name}/")
    else:
        raise RecipeError(f"--sources {sources_dir}: neither {local} nor {archive}")
    say(f"{name}: from {sources_dir} (stands for {pin.get('commit') or pin.get('branch')})")


def _link(link: Path, target: Path) -> None:
    """link -> target, replacing what was there (a submodule's empty folder, an older link)."""
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    link.symlink_to(target.resolve(), target_is_directory=True)


def fetch(sources: dict, sources_dir: str, work: Path, given: dict | None = None) -> dict:
    """Each part at its pin, under work/src: from `given` ({part: a checkout at its pin}: the
    image's build context), from sources_dir (a directory or NAME.tar.xz each, air-gapped sites
    and the GPU tier) or from its git remote. A part whose pin is unchanged is kept as it is (its
    objects with it)."""
    src = work / "src"
    src.mkdir(parents=True, exist_ok=True)
    trees = {}
    for name, pin in sources.items():
        tree, stamp = src / name, src / f"{name}.pin"
        want = json.dumps(pin, sort_keys=True)
        trees[name] = tree
        if tree.is_dir() and stamp.is_file() and stamp.read_text() == want:
            continue
        shutil.rmtree(tree, ignore_errors=True)
        if name in (given or {}):
            shutil.copytree(given[name], tree, symlinks=True, ignore=shutil.ignore_patterns(".git", "ftfleet"))
        elif sources_dir:
            _local(name, pin, sources_dir, src)
        elif "commit" in pin:
            _run(["git", "clone", "--quiet", "--no-checkout", pin["url"], str(tree)])
            _run(["git", "-C", str(tree), "checkout", "--quiet", pin["commit"]])
        else:
            _run(["git", "clone", "--quiet", "--depth", "1", "--branch", pin["branch"], pin["url"], str(tree)])
        stamp.write_text(want)
    if "FasterTransformer" in trees:  # the backend's build; the FT image's links cutlass into its context
        # FT's build reads cutlass from its submodule folder, and Triton's headers from
        # ../repo-core-src/include (FetchContent's folder beside its own): both are linked so.
        _link(trees["FasterTransformer"] / "3rdparty" / "cutlass", trees["cutlass"])
        _link(trees["FasterTransformer"].parent / "repo-core-src", trees["core"])
    return trees


def build(args: argparse.Namespace, recipe: dict) -> dict:
    cuda = cuda_of_nvcc()
    steps = plan(
        recipe, args.triton_version, args.flavour, sm=args.sm, cuda=cuda, multi_gpu=args.multi_gpu, prefix=args.prefix
    )
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    say(f"Triton {steps['triton_version']} {args.flavour} backend for SM {steps['sm']} with CUDA {cuda} in {work}")
    given = {"fastertransformer_backend": args.backend_src} if getattr(args, "backend_src", "") else None
    trees = fetch(steps["sources"], args.sources, work, given)
    for line in apply_edits(trees, cuda) + kernel_architectures(trees["backend"], cuda):
        say("edited " + line)
    obj = work / "obj"
    obj.mkdir(exist_ok=True)
    cmake = [
        "cmake",
        str(trees["fastertransformer_backend"]),
        *steps["cmake"],
        f"-DFT_DIR={trees['FasterTransformer']}",
    ]
    cmake += [f"-DFETCHCONTENT_SOURCE_DIR_REPO-{name.upper()}={trees[name]}" for name in ("core", "common", "backend")]
    if args.rapidjson_dir:
        cmake.append(f"-DRapidJSON_DIR={args.rapidjson_dir}")
    cmake += args.cmake_arg  # a site's own (where cuDNN is, say: FT's configure asks for it)
    _run(cmake, log=work / "cmake.log", cwd=obj)
    _run(["cmake", "--build", ".", "--target", "triton-fastertransformer-backend", "-j", str(args.jobs)],
         log=work / "make.log", cwd=obj)  # fmt: skip
    target = Path(steps["install"])
    target.mkdir(parents=True, exist_ok=True)
    built = {}
    for name in ("libtriton_fastertransformer.so", "libtransformer-shared.so"):
        found = sorted(obj.rglob(name))
        if not found:
            raise RecipeError(f"the build made no {name} under {obj}")
        shutil.copy2(found[0], target / name)  # the backend finds FT's library beside it ($ORIGIN)
        built[name] = str(target / name)
    seconds = round(time.time() - started)
    say(f"installed {', '.join(built)} in {target} ({seconds} s)")
    record = {**steps, "built": built, "seconds": seconds}
    (target / "ftfleet-build.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def image(args: argparse.Namespace, recipe: dict) -> None:
    """The build inside NGC's tritonserver image: apt, pip and then build."""
    steps = plan(recipe, args.triton_version, args.flavour, sm=args.sm, multi_gpu=args.multi_gpu, prefix=args.prefix)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    pins = python_pins(recipe, image_python(steps), drop=() if args.torch else ("torch",))
    for argv in prepare(recipe, steps, APT_PACKAGES, pins):
        _run(argv, env=env)
    build(args, recipe)
    shutil.rmtree(Path(args.work) / "obj", ignore_errors=True)  # the objects: gigabytes the image need not keep
    _run(["apt-get", "clean"], env=env)


def ft_plan(recipe: dict, triton_version: str, flavour: str = "nvidia", *, sm: str = "80", cuda: str = "",
            multi_gpu: bool = False) -> dict:  # fmt: skip
    """The FT image's build, computed only: the release's key fix and Python, the pins, FT's CMake
    arguments and the target (gpt_gemm)."""
    rel, pins, sms = _checked(recipe, triton_version, flavour, sm, cuda)
    said, cmake = _common(rel, flavour, sms, cuda, multi_gpu)
    return {
        **said,
        "python_packages": python_pins(recipe, rel["python"], drop=PYTORCH_IMAGE_OWN),
        "ft": pins["ft"],
        "sources": {"cutlass": pins["cutlass"]},
        "edits": [f"{e.part}/{e.pattern}: {e.why}" for e in edits_for(cuda or "0") if e.part == "FasterTransformer"],
        # FT alone: no TorchScript ops (the converters need none), cutlass linked at the recipe's pin
        "cmake": [*cmake, "-DBUILD_PYT=OFF", "-DGIT_AUTOCLONE_CUTLASS=OFF"],
        "target": "gpt_gemm",
    }


def build_ft(args: argparse.Namespace, recipe: dict) -> dict:
    """gpt_gemm in the FT tree given (--ft-src) at build/bin, the objects removed."""
    cuda = cuda_of_nvcc()
    steps = ft_plan(recipe, args.triton_version, args.flavour, sm=args.sm, cuda=cuda, multi_gpu=args.multi_gpu)
    tree = Path(args.ft_src).resolve()
    if not (tree / "src" / "fastertransformer").is_dir():
        raise RecipeError(f"--ft-src {tree}: not FasterTransformer's sources (no src/fastertransformer)")
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    say(f"FT {steps['target']} ({args.flavour}) for SM {steps['sm']} with CUDA {cuda} in {tree}")
    trees = fetch(steps["sources"], args.sources, work)
    _link(tree / "3rdparty" / "cutlass", trees["cutlass"])
    for line in apply_edits({"FasterTransformer": tree}, cuda):
        say("edited " + line)
    obj = tree / "build"
    obj.mkdir(exist_ok=True)
    _run(["cmake", str(tree), *steps["cmake"], *args.cmake_arg], log=work / "cmake.log", cwd=obj)
    _run(["cmake", "--build", ".", "--target", steps["target"], "-j", str(args.jobs)], log=work / "make.log", cwd=obj)
    binary = obj / "bin" / steps["target"]
    if not binary.is_file():
        raise RecipeError(f"the build made no {binary}")
    for path in obj.iterdir():  # the objects: gigabytes the image need not keep
        if path.name == "bin":
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    seconds = round(time.time() - started)
    record = {**steps, "built": str(binary), "seconds": seconds}
    (obj / "ftfleet-build.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    say(f"built {binary} ({seconds} s)")
    return record


def ft_image(args: argparse.Namespace, recipe: dict) -> None:
    """The FT image's build inside NGC's PyTorch image: apt, pip and then gpt_gemm."""
    steps = ft_plan(recipe, args.triton_version, args.flavour, sm=args.sm, multi_gpu=args.multi_gpu)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    pins = python_pins(recipe, image_python(steps), drop=PYTORCH_IMAGE_OWN)
    for argv in prepare(recipe, steps, FT_APT_PACKAGES, pins):
        _run(argv, env=env)
    build_ft(args, recipe)
    _run(["apt-get", "clean"], env=env)


def _build_options(cmd: argparse.ArgumentParser) -> None:
    """The options of a command that builds: where the sources come from and how."""
    cmd.add_argument("--sources", default="")
    cmd.add_argument("--work", default="/workspace/ftb-build")
    cmd.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    cmd.add_argument("--cmake-arg", action="append", default=[], help="one more argument for CMake (repeatable)")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True)
    sub.add_parser("versions")
    for name in ("plan", "build", "image", "plan-ft", "ft-image"):
        cmd = sub.add_parser(name)
        if name.endswith("-ft") or name.startswith("ft-"):
            cmd.add_argument("--release", "--triton-version", dest="triton_version", required=True,
                             help="the NGC release of the PyTorch image (DOCKER_VERSION)")  # fmt: skip
        else:
            cmd.add_argument("--triton-version", required=True)
            cmd.add_argument("--prefix", default="/opt/tritonserver")
        cmd.add_argument("--flavour", default="nvidia")
        cmd.add_argument("--sm", required=not name.startswith("plan"), default="80")
        cmd.add_argument("--multi-gpu", action="store_true")
        if name.startswith("plan"):
            cmd.add_argument("--cuda", default="")
            continue
        _build_options(cmd)
        if name in ("build", "image"):
            cmd.add_argument("--rapidjson-dir", default="")
        if name == "image":
            cmd.add_argument(
                "--torch", action="store_true", help="also the pinned torch (none of ftfleet's models need it)"
            )
            cmd.add_argument("--backend-src", default="", help="fastertransformer_backend at its pin (the context)")
        if name == "ft-image":
            cmd.add_argument("--ft-src", required=True, help="FasterTransformer's sources (the build context)")
    edit = sub.add_parser("edit-ft")
    edit.add_argument("tree")
    edit.add_argument("--cuda", default="")
    return top


def _planned(args: argparse.Namespace, recipe: dict) -> None:
    if args.command == "plan":
        steps = plan(recipe, args.triton_version, args.flavour, sm=args.sm, cuda=args.cuda, multi_gpu=args.multi_gpu,
                     prefix=args.prefix)  # fmt: skip
        print(json.dumps(steps, indent=1))
        return
    steps = ft_plan(recipe, args.triton_version, args.flavour, sm=args.sm, cuda=args.cuda, multi_gpu=args.multi_gpu)
    print(json.dumps({**steps, "prepare": prepare(recipe, steps, FT_APT_PACKAGES, steps["python_packages"])}, indent=1))


def _edit_ft(args: argparse.Namespace, _recipe: dict) -> None:
    for line in apply_edits({"FasterTransformer": Path(args.tree)}, args.cuda or cuda_of_nvcc()):
        say("edited " + line)


def main(argv: list | None = None) -> int:
    args = parser().parse_args(argv)
    recipe = load_recipe()
    commands = {
        "versions": lambda _args, recipe: print(json.dumps(versions(recipe), indent=1)),
        "plan": _planned,
        "plan-ft": _planned,
        "edit-ft": _edit_ft,
        "build": build,
        "image": image,
        "ft-image": ft_image,
    }
    try:
        commands[args.command](args, recipe)
    except RecipeError as err:
        say(f"error: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
