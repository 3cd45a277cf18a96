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

`build` takes the pinned sources from their git remotes, or from --sources DIR (a directory or a
.tar.xz per part: fastertransformer_backend, FasterTransformer, cutlass, core, common, backend),
applies the edits the CUDA in use needs (EDITS, in ftb_edits.py beside it, each checked: an edit whose text is not
found stops the build), configures the backend's CMake with every FetchContent source local
(FETCHCONTENT_FULLY_DISCONNECTED), builds the backend target for the SM values given, and
installs the backend and FT's library into PREFIX/backends/fastertransformer. `image` is `build`
inside NGC's image: the CUDA repository key where the release needs it, the build's apt packages,
and the Python packages the tokenizing models need, pinned for the image's Python.

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
    if flavour not in recipe["flavours"]:
        raise RecipeError(f"--flavour {flavour!r}: one of {', '.join(recipe['flavours'])}")
    rel = release(recipe, triton_version)
    pins = recipe["flavours"][flavour]
    branch = "r" + rel["version"]
    sms = sm_list(sm)
    if cuda and _major(cuda) >= 13 and any(int(s) < CUDA13_OLDEST_SM for s in sms):
        raise RecipeError(f"--sm {sm}: CUDA {cuda} builds SM {CUDA13_OLDEST_SM} and newer only")
    sources = {
        "fastertransformer_backend": {"url": pins["backend"]["url"], "commit": pins["backend"]["commit"]},
        "FasterTransformer": {"url": pins["ft"]["url"], "commit": pins["ft"]["commit"]},
        "cutlass": {"url": pins["cutlass"]["url"], "commit": pins["cutlass"]["commit"]},
        **{name: {"url": url, "branch": branch} for name, url in recipe["triton_repos"].items()},
    }
    cxx = "17" if cuda and _major(cuda) >= 13 else "14"
    return {
        "triton_version": rel["version"],
        "flavour": flavour,
        "python": rel["python"],
        "cuda_key": bool(rel.get("cuda_key")),
        "python_packages": recipe["python_packages"][rel["python"]],
        "sm": ",".join(sms),
        "multi_gpu": multi_gpu,
        "cuda": cuda,
        "sources": sources,
        "edits": [f"{e.part}/{e.pattern}: {e.why}" for e in edits_for(cuda or "0")],
        "cmake": [
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_INSTALL_PREFIX={prefix}",
            f"-DSM={','.join(sms)}",  # FT matches each value as a substring of SM
            f"-DBUILD_MULTI_GPU={'ON' if multi_gpu else 'OFF'}",
            "-DENABLE_FP8=OFF",
            f"-DCXX_STD={cxx}",
            f"-DTRITON_COMMON_REPO_TAG={branch}",
            f"-DTRITON_CORE_REPO_TAG={branch}",
            f"-DTRITON_BACKEND_REPO_TAG={branch}",
            "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
            # RapidJSON 1.1.0 (Debian's and Ubuntu's rapidjson-dev) derives from std::iterator, which
            # C++17 deprecates; GCC 12 and later warn, and Triton's common and backend build with -Werror.
            "-DCMAKE_CXX_FLAGS=-Wno-error=deprecated-declarations",
            *([] if cxx == "14" else ["-DUSE_NVTX=OFF"]),
            # CMake 4 keeps FindCUDA (which FT and the backend use) only under the old policy.
            "-DCMAKE_POLICY_DEFAULT_CMP0146=OLD",
            "-DCMAKE_POLICY_VERSION_MINIMUM=3.5",
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
    if steps["cuda_key"]:
        _run(["apt-key", "del", "7fa2af80"], env=env)
        _run(["apt-key", "adv", "--fetch-keys", CUDA_KEY_URL], env=env)
    _run(["apt-get", "update"], env=env)
    _run(["apt-get", "install", "-y", "--no-install-recommends", *APT_PACKAGES], env=env)
    wanted = dict(steps["python_packages"])
    torch = wanted.pop("torch")
    pins = [f"{name}=={version}" for name, version in wanted.items()]
    if args.torch:
        pins.append(f"torch=={torch}")
    # cmake from PyPI: the images' own cmake is older than the FetchContent options the build uses.
    _run([sys.executable, "-m", "pip", "install", "--no-cache-dir", "cmake>=3.24,<4", *pins], env=env)
    build(args, recipe)
    shutil.rmtree(Path(args.work) / "obj", ignore_errors=True)  # the objects: gigabytes the image need not keep
    _run(["apt-get", "clean"], env=env)


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("versions")
    for name in ("plan", "build", "image"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--triton-version", required=True)
        cmd.add_argument("--flavour", default="nvidia")
        cmd.add_argument("--sm", required=name != "plan", default="80")
        cmd.add_argument("--multi-gpu", action="store_true")
        cmd.add_argument("--prefix", default="/opt/tritonserver")
        if name == "plan":
            cmd.add_argument("--cuda", default="")
            continue
        cmd.add_argument("--sources", default="")
        cmd.add_argument("--work", default="/workspace/ftb-build")
        cmd.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
        cmd.add_argument("--rapidjson-dir", default="")
        cmd.add_argument("--cmake-arg", action="append", default=[], help="one more argument for CMake (repeatable)")
        if name == "image":
            cmd.add_argument(
                "--torch", action="store_true", help="also the pinned torch (none of ftfleet's models need it)"
            )
            cmd.add_argument("--backend-src", default="", help="fastertransformer_backend at its pin (the context)")
    edit = sub.add_parser("edit-ft")
    edit.add_argument("tree")
    edit.add_argument("--cuda", default="")
    args = parser.parse_args(argv)
    recipe = load_recipe()
    try:
        if args.command == "versions":
            print(json.dumps(versions(recipe), indent=1))
        elif args.command == "plan":
            steps = plan(
                recipe,
                args.triton_version,
                args.flavour,
                sm=args.sm,
                cuda=args.cuda,
                multi_gpu=args.multi_gpu,
                prefix=args.prefix,
            )
            print(json.dumps(steps, indent=1))
        elif args.command == "edit-ft":
            for line in apply_edits({"FasterTransformer": Path(args.tree)}, args.cuda or cuda_of_nvcc()):
                say("edited " + line)
        elif args.command == "build":
            build(args, recipe)
        else:
            image(args, recipe)
    except RecipeError as err:
        say(f"error: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
