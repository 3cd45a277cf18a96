"""Convert a Hugging Face checkpoint to the FasterTransformer layout, on the CPU.

    python3 -m ftnative.convert -i CKPT_DIR -o OUT_DIR --family gptj --tp 2 [--weight-dtype fp16]

Writes OUT_DIR/<tp>-gpu/: config.ini and one raw little-endian file per weight (split tensors
per rank), exactly the files ft_expected_files lists. The directory is built aside
(OUT_DIR/.<tp>-gpu.<stamp>), verified file by file against ft_expected_files and the config.ini
keys, and only then published: <tp>-gpu is a symlink flipped atomically to the new build, so a
reader sees the old shards or the new ones, never a mix. A failure leaves the previous shards in
place. Layers are converted in parallel (--workers), each worker holding a few tensors at a time.

The build that a publish replaces stays as the previous one (OUT_DIR/.<tp>-gpu.previous, a link
to it); older builds go. --restore-previous makes the previous build the published one again
(and the published one the previous): going back to the last revision is a link flip, not a
conversion.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.families import FAMILIES
from ftdomain.ft.layout import ft_config_ini, ft_expected_files
from ftdomain.ft.model import ft_model_params, ft_parallelism_problems
from ftdomain.ft.tensors import dims

from . import __version__
from .checkpoint import CheckpointError, f32_to_bf16
from .hfmap import mapping
from .jaxslim import open_checkpoint

MANIFEST = "conversion.json"


class ConversionError(Exception):
    """A conversion that cannot be done; the message says why."""


def _write(array: np.ndarray, path: Path, dtype: str) -> int:
    if dtype == "fp32":
        data = np.ascontiguousarray(array, dtype="<f4")
    elif dtype == "fp16":
        data = np.ascontiguousarray(array, dtype="<f2")
    else:
        data = f32_to_bf16(array).astype("<u2")
    data.tofile(path)
    return data.nbytes


def _convert_part(job: tuple[str, str, dict, int, str], layer: int | None, out: str) -> int:
    """Write the files of one layer (or of the global tensors, layer None); return the bytes written.
    job: (checkpoint directory, family, params, tp, weight dtype)."""
    ckpt_dir, family, params, tp, dtype = job
    ckpt = open_checkpoint(ckpt_dir)
    fam = FAMILIES[family]
    make = mapping(family, ckpt.config, tp, dtype)
    d = dims(params, "ftnative.convert")
    tensors = fam.global_tensors(params) if layer is None else fam.layer_tensors(params)
    written = 0
    for tensor in tensors:
        full = make(tensor.name, ckpt, layer)
        want = tensor.shape(d)
        stem = tensor.name.replace("{L}", str(layer))
        if full.shape != want:
            raise ConversionError(f"{stem}: the checkpoint gives shape {full.shape}, FT needs {want}")
        if tensor.split_axis is None:
            written += _write(full, Path(out) / f"{stem}.bin", dtype)
        else:
            for rank, part in enumerate(np.split(full, tp, axis=tensor.split_axis)):
                written += _write(part, Path(out) / f"{stem}.{rank}.bin", dtype)
        del full
    return written


def verify(directory: Path, family: str, params: dict, tp: int, dtype: str) -> None:
    """Raise ConversionError unless `directory` holds exactly the expected files and config.ini keys."""
    ini = configparser.ConfigParser()
    ini.read(directory / "config.ini")
    section = FAMILIES[family].ini_section
    if section not in ini:
        raise ConversionError(f"{directory}: config.ini has no [{section}] section")
    missing_keys = [key for key in FAMILIES[family].ini_required_keys if key not in ini[section]]
    if missing_keys:  # without them the expected files cannot even be listed
        raise ConversionError(f"{directory}: " + "; ".join(f"config.ini lacks {key}" for key in missing_keys))
    expected = {f["name"]: f["bytes"] for f in ft_expected_files(family, params, tp, dtype)}
    present = {p.name: p.stat().st_size for p in directory.glob("*.bin")}
    problems = [f"missing {name}" for name in sorted(set(expected) - set(present))]
    problems += [
        f"{name} has {present[name]} bytes, expected {size}"
        for name, size in sorted(expected.items())
        if name in present and present[name] != size
    ]
    problems += [f"unexpected {name}" for name in sorted(set(present) - set(expected))]
    if problems:
        raise ConversionError(f"{directory}: " + "; ".join(problems))


def previous_link(final: Path) -> Path:
    """The link to the build that the published one replaced: OUT/.<tp>-gpu.previous."""
    return final.with_name(f".{final.name}.previous")


def _point(link: Path, target: Path) -> None:
    """Make `link` a symlink to `target` (a sibling), atomically (a new link renamed over it)."""
    tmp = link.with_name(f".{link.name.lstrip('.')}.link-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.name)
    os.replace(tmp, link)


def _target(link: Path) -> Path | None:
    return link.resolve() if link.is_symlink() and link.resolve().is_dir() else None


def publish(build: Path, final: Path) -> None:
    """Point `final` at `build` atomically (a symlink renamed over the old one); the build it
    replaces becomes the previous one (kept for --restore-previous), the one before that goes."""
    build, old = build.resolve(), _target(final)
    if final.exists() and not final.is_symlink():
        # A directory from another converter: move it aside first (a short window without shards).
        aside = final.with_name(f".{final.name}.replaced-{os.getpid()}")
        final.rename(aside)
        old = aside
    before = _target(previous_link(final))
    _point(final, build)
    if old is not None and old != build:
        _point(previous_link(final), old)
    if before is not None and before not in (build, old):
        shutil.rmtree(before)


def restore_previous(out: Path, tp: int) -> Path:
    """Publish the previous build again (atomically) and keep the one it replaces as the previous."""
    final = Path(out) / f"{tp}-gpu"
    current, previous = _target(final), _target(previous_link(final))
    if previous is None or not (previous / MANIFEST).is_file():
        raise ConversionError(f"{final}: there is no previous build to restore")
    _point(final, previous)
    if current is not None:
        _point(previous_link(final), current)
    return final


def _model_params(ckpt_dir: str | Path, family: str, tp: int, weight_dtype: str) -> dict:
    """The FT parameters of the checkpoint, or ConversionError when it cannot be converted as asked."""
    try:
        ckpt = open_checkpoint(ckpt_dir)
    except (CheckpointError, OSError, ValueError) as err:
        raise ConversionError(str(err)) from None
    if getattr(ckpt, "family", family) != family:
        raise ConversionError(f"{ckpt_dir}: a {ckpt.family} checkpoint (its layout), not {family}")
    return model_params_from_config(ckpt.config, family, tp, weight_dtype)


def model_params_from_config(config: dict, family: str, tp: int, weight_dtype: str) -> dict:
    """The FT parameters of a checkpoint's config.json, or ConversionError when it cannot be converted as asked."""
    if family not in FAMILIES:
        raise ConversionError(f"unknown family {family!r} (valid: {', '.join(sorted(FAMILIES))})")
    fam = FAMILIES[family]
    if weight_dtype not in fam.weight_dtypes:
        raise ConversionError(f"--weight-dtype {weight_dtype}: FT reads {', '.join(fam.weight_dtypes)} for {family}")
    try:
        params = ft_model_params(config, family)
    except (AnsibleFilterError, ValueError) as err:
        raise ConversionError(str(err)) from None
    problems = ft_parallelism_problems(params, tp, 1, None)
    if problems:
        raise ConversionError(f"--tp {tp}: " + "; ".join(problems))
    return params


def new_build(out: Path, tp: int) -> tuple[Path, Path]:
    """Remove builds of killed runs (neither published nor the previous); return OUT/<tp>-gpu and
    a new, empty build directory beside it (OUT/.<tp>-gpu.<stamp>.<random>)."""
    out.mkdir(parents=True, exist_ok=True)
    final = out / f"{tp}-gpu"
    keep = {_target(final), _target(previous_link(final))}
    for stale in out.glob(f".{tp}-gpu.*"):
        if stale.is_dir() and not stale.is_symlink() and stale.resolve() not in keep:
            shutil.rmtree(stale, ignore_errors=True)
    build = Path(tempfile.mkdtemp(prefix=f".{tp}-gpu.{time.strftime('%Y%m%dT%H%M%S')}.", dir=out))
    build.chmod(0o755)
    return final, build


def _seal(
    build: Path, final: Path, *, engine: str, family: str, tp: int, dtype: str, ckpt_dir, started, inputs
) -> dict:
    """Write the manifest into the verified build and publish it."""
    total = sum(p.stat().st_size for p in build.glob("*.bin"))
    manifest = {
        "engine": engine,
        "version": __version__,
        "family": family,
        "tp": tp,
        "weight_dtype": dtype,
        "checkpoint": str(Path(ckpt_dir).resolve()),
        "bytes": total,
        "seconds": round(time.monotonic() - started, 2),
        # What the caller says this conversion was made from (e.g. the checkpoint's commit),
        # published together with the shards so a rerun can compare.
        "inputs": inputs or {},
    }
    (build / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    publish(build, final)
    return manifest


def adopt(
    staged: str | Path,
    ckpt_dir: str | Path,
    out_dir: str | Path,
    family: str,
    tp: int,
    *,
    weight_dtype: str = "fp32",
    inputs: dict | None = None,
    engine: str = "upstream",
) -> Path:
    """Publish a <tp>-gpu directory written by another converter (the upstream one) as OUT_DIR/<tp>-gpu.

    It is checked against the CHECKPOINT's shape (not only its own config.ini) before anything
    moves; a directory that fails stays where it is and the published shards are untouched.
    """
    started = time.monotonic()
    params = _model_params(ckpt_dir, family, tp, weight_dtype)
    staged = Path(staged)
    if not staged.is_dir():
        raise ConversionError(f"{staged}: the converter wrote no directory here")
    verify(staged, family, params, tp, weight_dtype)
    final, build = new_build(Path(out_dir), tp)
    try:
        build.rmdir()
        os.rename(staged, build)  # same file system: the staging directory lives under OUT_DIR
        build.chmod(0o755)
        _seal(build, final, engine=engine, family=family, tp=tp, dtype=weight_dtype, ckpt_dir=ckpt_dir,
              started=started, inputs=inputs)  # fmt: skip
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return final


def convert(
    ckpt_dir: str | Path,
    out_dir: str | Path,
    family: str,
    tp: int,
    weight_dtype: str = "fp32",
    *,
    workers: int = 1,
    log=print,
    inputs: dict | None = None,
) -> Path:
    """Convert and publish OUT_DIR/<tp>-gpu; return its path."""
    params = _model_params(ckpt_dir, family, tp, weight_dtype)
    final, build = new_build(Path(out_dir), tp)
    started = time.monotonic()
    try:
        (build / "config.ini").write_text(ft_config_ini(params, family, weight_dtype, tp))
        parts: list[int | None] = [None, *range(params["num_layer"])]
        job = (str(ckpt_dir), family, params, tp, weight_dtype)
        total = 0
        if workers <= 1:
            for done, layer in enumerate(parts, 1):
                total += _convert_part(job, layer, str(build))
                log(f"[{done}/{len(parts)}] {'embeddings and head' if layer is None else f'layer {layer}'}")
        else:
            with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
                futures = {pool.submit(_convert_part, job, layer, str(build)): layer for layer in parts}
                for done, future in enumerate(as_completed(futures), 1):
                    total += future.result()
                    layer = futures[future]
                    log(f"[{done}/{len(parts)}] {'embeddings and head' if layer is None else f'layer {layer}'}")
        verify(build, family, params, tp, weight_dtype)
        manifest = _seal(build, final, engine="native", family=family, tp=tp, dtype=weight_dtype, ckpt_dir=ckpt_dir,
                         started=started, inputs=inputs)  # fmt: skip
    except BaseException as err:
        shutil.rmtree(build, ignore_errors=True)
        if isinstance(err, (CheckpointError, KeyError)):
            raise ConversionError(str(err).strip("'\"")) from None
        raise
    log(f"converted {family} for tp {tp} ({weight_dtype}): {total / 1e6:.1f} MB in {manifest['seconds']} s -> {final}")
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m ftnative.convert",
        description="Convert a Hugging Face checkpoint to FasterTransformer's <tp>-gpu layout, verified, on the CPU.",
    )
    parser.add_argument("-i", "--input", help="Hugging Face checkpoint directory (config.json + weights)")
    parser.add_argument("-o", "--output", required=True, help="directory that receives <tp>-gpu/")
    parser.add_argument("--family", choices=sorted(FAMILIES))
    parser.add_argument("--tp", type=int, required=True, help="tensor-parallel size")
    parser.add_argument("--weight-dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel layer conversions")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--inputs", default="{}", help="JSON object recorded as 'inputs' in conversion.json")
    parser.add_argument(
        "--adopt",
        metavar="DIR",
        help="do not convert: verify DIR (a <tp>-gpu directory another converter wrote under OUT_DIR) "
        "against the checkpoint and publish it as OUT_DIR/<tp>-gpu",
    )
    parser.add_argument(
        "--restore-previous",
        action="store_true",
        help="do not convert: publish the previous build of OUT_DIR/<tp>-gpu again (it must exist)",
    )
    args = parser.parse_args(argv)
    if args.tp < 1 or args.workers < 1:
        parser.error("--tp and --workers must be positive")
    if not args.restore_previous and not (args.input and args.family):
        parser.error("--input and --family are required (except with --restore-previous)")
    try:
        inputs = json.loads(args.inputs)
    except ValueError as err:
        parser.error(f"--inputs is not JSON: {err}")
    if not isinstance(inputs, dict):
        parser.error("--inputs must be a JSON object")
    log = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        if args.restore_previous:
            print(restore_previous(Path(args.output), args.tp))
            return 0
        if args.adopt:
            final = adopt(
                args.adopt, args.input, args.output, args.family, args.tp, weight_dtype=args.weight_dtype, inputs=inputs
            )
            print(final)
            return 0
        final = convert(
            args.input,
            args.output,
            args.family,
            args.tp,
            args.weight_dtype,
            workers=args.workers,
            log=log,
            inputs=inputs,
        )
    except ConversionError as err:
        print(f"ftnative.convert: error: {err}", file=sys.stderr)
        return 2
    print(final)
    return 0


if __name__ == "__main__":
    sys.exit(main())
