"""Converted shards (and other files a fleet makes once) as OCI artifacts in a registry, through
the ORAS Python SDK.

    python3 -m ftnative.artifact lookup REF
    python3 -m ftnative.artifact push REF --shards OUT/<tp>-gpu --checkpoint CKPT --inputs JSON
    python3 -m ftnative.artifact pull REF --output OUT --checkpoint CKPT --inputs JSON
    python3 -m ftnative.artifact push-dir REF --dir DIR --inputs JSON
    python3 -m ftnative.artifact pull-dir REF --dir DIR --inputs JSON [--require FILE ...]

REF is registry/repository:tag; the oras package must be importable (the hosts' registry
virtualenv). One artifact holds one published shard directory (config.ini, every weight file,
conversion.json) as layers titled shards/<name>, and the checkpoint's small files (config.json,
the tokenizer's: everything at its top level but weights and dot files) as hf/<name>, so that a
host that pulls never fetches the checkpoint. The manifest's annotation ftfleet.inputs holds the
conversion's inputs; its config blob is the shards' conversion.json.

push uploads every blob (one already there is skipped, so a killed push resumes) and the manifest
last: the registry tags nothing until the manifest is in, so a killed push leaves no tag.
pull writes into a new build directory beside the shards (OUT/.<tp>-gpu.<stamp>), checks every
blob's size and sha256 against the manifest, verifies the shards against the model's shape from
the artifact's config.json (ftnative.convert's verify), requires the recorded inputs to be the ones
asked for, then moves the small files into CKPT and flips OUT/<tp>-gpu to the build atomically. A
killed or refused pull publishes nothing; the next run removes its build.

push-dir and pull-dir carry one small directory (a tuned gemm_config.in with its record) as layers
titled files/<name>, with the inputs as annotation and config blob. pull-dir downloads into a new
directory beside DIR (.<name>.pull.<random>), checks every blob by size and sha256, requires the
recorded inputs to be the ones asked for and each --require file to be non-empty, then renames it
to DIR (which must not exist yet): DIR appears complete or not at all.

Credentials come on standard input as one JSON object {"username": ..., "password": ...} (empty
for none). --ca FILE trusts a CA; --plain-http talks HTTP. Exit status: 0 done (lookup: present),
3 lookup: absent (not 1, which Python's own failures give), 2 any fault, named on standard error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import oras.oci
import oras.provider
import requests

from .convert import MANIFEST, ConversionError, model_params_from_config, new_build, publish, verify

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_SHARD = "application/vnd.ftfleet.shard.v1"
MEDIA_MODEL_FILE = "application/vnd.ftfleet.model-file.v1"
MEDIA_CONFIG = "application/vnd.ftfleet.conversion.v1+json"
MEDIA_FILE = "application/vnd.ftfleet.file.v1"
MEDIA_INPUTS = "application/vnd.ftfleet.inputs.v1+json"
TITLE = "org.opencontainers.image.title"
INPUTS = "ftfleet.inputs"
MARKER = ".ftfleet-artifact.json"  # in CKPT on a host that pulled: where its files came from
WEIGHTS = (".bin", ".safetensors", ".pt", ".pth", ".h5", ".msgpack", ".ckpt", ".gguf", ".onnx", ".npz")
ABSENT = 3  # lookup's exit status for a tag the registry does not have
CHUNKED = 16 * 1024 * 1024  # larger blobs go up in chunks, not read whole into memory


class ArtifactError(Exception):
    """The registry or the artifact is not as required; the message says how."""


def model_files(checkpoint: Path) -> list[Path]:
    """The checkpoint's files a server needs besides the weights: config.json, the tokenizer's."""
    return sorted(
        path
        for path in checkpoint.iterdir()
        if path.is_file() and not path.name.startswith(".") and not path.name.endswith(WEIGHTS)
    )


def _client(ref: str, args: argparse.Namespace, credentials: dict):

    host = ref.split("/", 1)[0]
    # Basic auth with credentials; without, the token backend (anonymous tokens, or none needed).
    basic = bool(credentials.get("username"))
    client = oras.provider.Registry(hostname=host, insecure=args.plain_http, tls_verify=args.ca or True,
                                    auth_backend="basic" if basic else "token")  # fmt: skip
    if basic:
        client.auth.set_basic_auth(credentials["username"], credentials.get("password", ""))
    # Ask once, briefly, before anything else: the SDK retries a refused connection for minutes.
    try:
        requests.get(f"{client.prefix}://{host}/v2/", timeout=15, verify=client._tls_verify)
    except requests.RequestException as err:
        raise ArtifactError(f"{host}: the registry cannot be reached: {err}") from None
    return client


def _say_http(err: Exception, ref: str) -> str:
    response = getattr(err, "response", None)
    if response is not None:
        return f"{ref}: the registry answered {response.status_code}: {response.text.strip()[:300]}"
    return f"{ref}: {type(err).__name__}: {err}"


def manifest_of(client, ref: str) -> dict | None:
    """The artifact's manifest, or None when the registry does not have the tag."""

    container = client.get_container(ref)
    try:
        response = client.do_request(f"{client.prefix}://{container.manifest_url()}", "GET",
                                     headers={"Accept": MEDIA_MANIFEST})  # fmt: skip
    except requests.RequestException as err:
        raise ArtifactError(_say_http(err, ref)) from None
    except ValueError as err:  # the SDK could not answer the registry's request for credentials
        raise ArtifactError(f"{ref}: {err} (the registry wants credentials: fleet_registry_username, "
                            "fleet_registry_password)") from None  # fmt: skip
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise ArtifactError(f"{ref}: the registry answered {response.status_code}: {response.text.strip()[:300]}")
    return response.json()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def _upload(client, ref: str, path: Path, media_type: str, title: str | None) -> dict:

    layer = oras.oci.NewLayer(str(path), media_type=media_type)
    if title:
        layer["annotations"] = {TITLE: title}
    response = client.upload_blob(str(path), ref, layer, do_chunked=layer["size"] > CHUNKED)
    if response.status_code not in (200, 201, 202):
        raise ArtifactError(f"{ref}: uploading {title or path.name} was refused ({response.status_code}): "
                            f"{response.text.strip()[:300]}")  # fmt: skip
    return layer


def push(client, ref: str, shards: Path, checkpoint: Path, inputs: dict) -> dict:
    """Upload the published shard directory and the checkpoint's small files; the manifest last."""
    recorded = json.loads((shards / MANIFEST).read_text()).get("inputs")
    if recorded != inputs:
        raise ArtifactError(f"{shards}/{MANIFEST} records inputs {recorded}, not {inputs}: not pushed")
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "layers": [_upload(client, ref, p, MEDIA_SHARD, f"shards/{p.name}")
                   for p in sorted(shards.resolve().iterdir())],
        "annotations": {INPUTS: json.dumps(inputs, sort_keys=True)},
    }  # fmt: skip
    manifest["layers"] += [_upload(client, ref, p, MEDIA_MODEL_FILE, f"hf/{p.name}") for p in model_files(checkpoint)]
    manifest["config"] = _upload(client, ref, shards / MANIFEST, MEDIA_CONFIG, None)
    response = client.upload_manifest(manifest, client.get_container(ref))
    if response.status_code not in (200, 201):
        raise ArtifactError(f"{ref}: the manifest was refused ({response.status_code}): {response.text.strip()[:300]}")
    return {"layers": len(manifest["layers"]), "bytes": sum(layer["size"] for layer in manifest["layers"])}


def _download(client, ref: str, layer: dict, target: Path) -> None:
    """Fetch one blob to `target` and refuse it unless its size and sha256 are the manifest's."""

    try:
        client.download_blob(ref, layer["digest"], str(target))
    except requests.RequestException as err:
        raise ArtifactError(_say_http(err, ref)) from None
    size, digest = target.stat().st_size, sha256_of(target)
    if size != layer["size"] or digest != layer["digest"]:
        raise ArtifactError(
            f"{ref}: {layer['annotations'][TITLE]} came with {size} bytes, digest {digest}; the manifest says "
            f"{layer['size']} bytes, {layer['digest']}: refused (a corrupted blob in the registry?)"
        )


def _layers_of(client, ref: str, inputs: dict, kinds: tuple[str, ...]) -> tuple[list[dict], list[str]]:
    """The artifact's layers and their titles, after checking that it was made from `inputs` and
    that every title is <kind>/<file name> with a kind of `kinds`."""
    manifest = manifest_of(client, ref)
    if manifest is None:
        raise ArtifactError(f"{ref}: not in the registry")
    recorded = json.loads(manifest.get("annotations", {}).get(INPUTS, "null"))
    if recorded != inputs:
        raise ArtifactError(f"{ref} was made from {recorded}, not {inputs}: refused")
    layers = manifest["layers"]
    titles = [(layer.get("annotations") or {}).get(TITLE, "") for layer in layers]
    bad = [t for t in titles if t.count("/") != 1 or t.split("/")[0] not in kinds or t.split("/")[1] in ("", ".", "..")]
    if bad:
        wanted = " or ".join(f"{kind}/<file>" for kind in kinds)
        raise ArtifactError(f"{ref}: layers titled {bad} are not {wanted}: refused")
    return layers, titles


def push_dir(client, ref: str, directory: Path, inputs: dict) -> dict:
    """Upload every file of `directory` (dot files aside) and the inputs; the manifest last."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise ArtifactError(f"{directory}: no files to push")
    layers = [_upload(client, ref, p, MEDIA_FILE, f"files/{p.name}") for p in files]
    with tempfile.TemporaryDirectory() as scratch:
        config = Path(scratch) / "inputs.json"
        config.write_text(json.dumps(inputs, sort_keys=True))
        manifest = {"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "layers": layers,
                    "annotations": {INPUTS: json.dumps(inputs, sort_keys=True)},
                    "config": _upload(client, ref, config, MEDIA_INPUTS, None)}  # fmt: skip
        response = client.upload_manifest(manifest, client.get_container(ref))
    if response.status_code not in (200, 201):
        raise ArtifactError(f"{ref}: the manifest was refused ({response.status_code}): {response.text.strip()[:300]}")
    return {"layers": len(layers), "bytes": sum(layer["size"] for layer in layers)}


def pull_dir(client, ref: str, directory: Path, inputs: dict, required: list[str]) -> dict:
    """Download into a new directory beside `directory`, check it, then rename it into place."""
    if directory.exists() and any(directory.iterdir()):
        raise ArtifactError(f"{directory} exists already: not replaced")
    layers, titles = _layers_of(client, ref, inputs, ("files",))
    directory.parent.mkdir(parents=True, exist_ok=True)
    for stale in directory.parent.glob(f".{directory.name}.pull.*"):  # left by a killed pull
        shutil.rmtree(stale, ignore_errors=True)
    incoming = Path(tempfile.mkdtemp(prefix=f".{directory.name}.pull.", dir=directory.parent))
    try:
        for layer, title in zip(layers, titles):  # titles: one per layer (_layers_of)
            _download(client, ref, layer, incoming / title.split("/")[1])
        empty = [name for name in required if not (incoming / name).is_file() or (incoming / name).stat().st_size == 0]
        if empty:
            raise ArtifactError(f"{ref}: the artifact has no (or an empty) {', '.join(empty)}: refused")
        incoming.chmod(0o755)
        os.rename(incoming, directory)  # replaces an empty directory, fails on a full one
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    return {"layers": len(layers), "bytes": sum(layer["size"] for layer in layers), "published": str(directory)}


def pull(client, ref: str, out: Path, checkpoint: Path, inputs: dict) -> dict:
    """Download, check by digest, verify the shards, then publish them and the small files."""
    layers, titles = _layers_of(client, ref, inputs, ("shards", "hf"))
    tp = int(inputs["tp"])
    final, build = new_build(out, tp)  # also removes the builds of killed runs
    checkpoint.mkdir(parents=True, exist_ok=True)
    for stale in checkpoint.glob(".ftfleet-pull.*"):  # small files of a killed pull
        shutil.rmtree(stale, ignore_errors=True)
    incoming = Path(tempfile.mkdtemp(prefix=".ftfleet-pull.", dir=checkpoint))
    try:
        for layer, title in zip(layers, titles):  # titles: one per layer (_layers_of)
            kind, name = title.split("/")
            _download(client, ref, layer, (build if kind == "shards" else incoming) / name)
        if not (incoming / "config.json").is_file():
            raise ArtifactError(f"{ref}: the artifact has no hf/config.json: refused")
        config = json.loads((incoming / "config.json").read_text())
        verify(build, inputs["family"], model_params_from_config(config, inputs["family"], tp, inputs["weight_dtype"]),
               tp, inputs["weight_dtype"])  # fmt: skip
        if json.loads((build / MANIFEST).read_text()).get("inputs") != inputs:
            raise ArtifactError(f"{ref}: its {MANIFEST} does not record {inputs}: refused")
        for path in incoming.iterdir():
            os.replace(path, checkpoint / path.name)
        (checkpoint / MARKER).write_text(json.dumps({"ref": ref, "inputs": inputs}, sort_keys=True, indent=1) + "\n")
        publish(build, final)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
    return {"layers": len(layers), "bytes": sum(layer["size"] for layer in layers), "published": str(final)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m ftnative.artifact", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["lookup", "push", "pull", "push-dir", "pull-dir"])
    parser.add_argument("ref", help="registry/repository:tag")
    parser.add_argument("--shards", type=Path, help="push: the published <tp>-gpu directory")
    parser.add_argument("--output", type=Path, help="pull: the directory that receives <tp>-gpu")
    parser.add_argument("--checkpoint", type=Path, help="push: where the small files are; pull: where they go")
    parser.add_argument("--dir", type=Path, help="push-dir: the directory pushed; pull-dir: the one made")
    parser.add_argument("--require", action="append", default=[], help="pull-dir: a file that must come, non-empty")
    parser.add_argument("--inputs", default="{}", help="the inputs the artifact was made from (JSON)")
    parser.add_argument("--ca", help="a PEM file of the CA that signed the registry's certificate")
    parser.add_argument("--plain-http", action="store_true", help="talk plain HTTP to the registry")
    args = parser.parse_args(argv)
    if args.action in ("push", "pull") and (args.checkpoint is None or (args.shards or args.output) is None):
        parser.error(f"{args.action} needs --checkpoint and --{'shards' if args.action == 'push' else 'output'}")
    if args.action.endswith("-dir") and args.dir is None:
        parser.error(f"{args.action} needs --dir")
    try:
        inputs = json.loads(args.inputs)
        credentials = json.loads(sys.stdin.read() or "{}") if not sys.stdin.isatty() else {}
    except ValueError as err:
        parser.error(f"--inputs and standard input must be JSON: {err}")
    try:
        client = _client(args.ref, args, credentials)
        if args.action == "lookup":
            manifest = manifest_of(client, args.ref)
            print(json.dumps({"present": manifest is not None}))
            return 0 if manifest is not None else ABSENT
        if args.action == "push":
            result = push(client, args.ref, args.shards, args.checkpoint, inputs)
        elif args.action == "push-dir":
            result = push_dir(client, args.ref, args.dir, inputs)
        elif args.action == "pull-dir":
            result = pull_dir(client, args.ref, args.dir, inputs, args.require)
        else:
            result = pull(client, args.ref, args.output, args.checkpoint, inputs)
    except (ArtifactError, ConversionError, OSError, KeyError, ValueError) as err:
        print(f"ftnative.artifact: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
