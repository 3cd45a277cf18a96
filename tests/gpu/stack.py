"""The real stack on a GPU (scripts/ft-gpu-check stack): tritonserver (the nvidia-pytriton wheel's,
Triton 2.51 / r24.10) loads the FasterTransformer backend built by the project's recipe
(roles/triton_image/files/ftb/ftb_build.py) and serves the model repository that
roles/triton_model_repo rendered (scripts/ft-gpu-check render, on the controller, as site.yml
renders it), with shards written by ftnative.convert. For each family a random checkpoint is made
here with transformers (head size 64: FT's kernels refuse the lab's 16), with the lab's tokenizer.

    python3 tests/gpu/stack.py --tritonserver DIR --backend DIR --repos DIR --stub-python VENV
                               [--out DIR] [--families gpt,gptj,gptneox,bloom]

Per family, with fp32 weights and data_type fp32:
- whole: the ensemble's text over HTTP equals transformers' greedy generate(), decoded;
- FT: the fastertransformer model's ids equal transformers' greedy tokens; beam search (width 2),
  repetition penalty 1.3 and the cumulative log probability equal the CPU stand-in's
  (ftnative.decode) on the same shards;
- streamed: the decoupled repository answers through Triton's generate_stream in several
  events, the last one equal to the whole answer;
- the gateway (--gateway-python: a virtualenv with roles/gateway/files/requirements.txt, the
  ftgateway package zipped by roles/gateway/files/pack-app, as the role installs both) in front of
  each repository, tokenizing itself (the role's default) and through the repository's models, and
  the openai client (--client-python; tests/gpu/gateway_client.py) asking it: greedy, streamed,
  repetition penalty 1.3, best_of 2, logprobs and a stop sequence, each equal to transformers'
  or the stand-in's answer decoded.
Prints a table, writes results.json under --out; exit status 1 when a verdict fails.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import check  # noqa: E402 - the GPU tier's shared pieces (models, the stand-in)

torch, transformers = check.torch, check.transformers
ROOT = check.ROOT
TOKENIZER = ROOT / "lab" / "models" / "tiny-gpt2"  # its tokenizer.json and tokenizer_config.json
LAB_MODELS = {"gpt": "tiny-gpt2", "gptneox": "tiny-neox"}  # --lab: the lab's own model of each family
PROMPT_TEXT = "Every role does one job"
NEW_TOKENS = 16
LOGPROB_TOLERANCE = check.LOGPROB_TOLERANCE


def free_ports(count: int) -> list[int]:
    """`count` different free ports: each socket stays bound until all are chosen (one at a time,
    the kernel may hand out the same port twice)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def free_port() -> int:
    return free_ports(1)[0]


def lab_checkpoint(family: str, where: Path) -> tuple:
    """The lab's own model of the family (lab/models, as `make lab` serves it), copied to `where`."""
    shutil.copytree(ROOT / "lab" / "models" / LAB_MODELS[family], where)
    tokenizer = transformers.AutoTokenizer.from_pretrained(where)
    model = transformers.AutoModelForCausalLM.from_pretrained(where).eval()
    return model, tokenizer, tokenizer.eos_token_id


def make_checkpoint(family: str, where: Path, lab: bool = False) -> tuple:
    """A random model of the family (seed 0) with the lab tokenizer's vocabulary and end id, or
    with `lab` the lab's own model of the family."""
    if lab:
        return lab_checkpoint(family, where)
    lab = json.loads((TOKENIZER / "config.json").read_text())
    eos = lab["eos_token_id"]
    config = check.FAMILIES[family][1]()
    config.vocab_size, config.bos_token_id, config.eos_token_id = lab["vocab_size"], eos, eos
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(where, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, where / name)
    # As the tokenizing models load it (tokenizer_model.py): the same ids for the same prompt.
    return model, transformers.AutoTokenizer.from_pretrained(where), eos


@contextlib.contextmanager
def tritonserver(args, repo: Path, work: Path):
    """The wheel's tritonserver on 127.0.0.1 with `repo`; the stub runs on --stub-python (the
    serving image's numpy 1.x: the r24.10 stub misreads BYTES tensors under numpy 2)."""
    http, grpc, metrics = free_ports(3)
    log = work / f"tritonserver-{repo.name}.log"
    env = {
        **os.environ,
        "PATH": f"{args.stub_python / 'bin'}:/usr/bin:/bin",
        "LD_LIBRARY_PATH": ":".join(str(p) for p in args.libs),
        "HF_HUB_OFFLINE": "1",
    }
    argv = [
        str(args.tritonserver / "bin" / "tritonserver"),
        f"--model-repository={repo}",
        f"--backend-directory={args.backends}",
        "--http-address=127.0.0.1",
        f"--http-port={http}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        "--allow-metrics=false",
    ]
    ready = f"http://127.0.0.1:{http}/v2/health/ready"
    said = lambda: f"tritonserver did not become ready:\n{errors(log)}"  # noqa: E731
    with running(argv, env, log, work, ready=ready, seconds=180, failure=said):
        yield f"http://127.0.0.1:{http}", f"127.0.0.1:{grpc}", log


@contextlib.contextmanager
def running(argv: list, env: dict, log: Path, work: Path, *, ready: str, seconds: float, failure):
    """A server process writing to `log`, once `ready` answers 200 (RuntimeError(failure()) when it
    exits or `seconds` pass first); stopped (terminated, then killed) on the way out."""
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=work)
        try:
            deadline = time.monotonic() + seconds
            while True:
                with contextlib.suppress(OSError):
                    if urllib.request.urlopen(ready, timeout=2).status == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(failure())
                time.sleep(0.5)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def errors(log: Path) -> str:
    """Triton's error lines (E...) and what a failing model said, from the whole log."""
    lines = log.read_text(errors="replace").splitlines()
    picked = [line for line in lines if line[:1] == "E" or "error" in line.lower() or "Traceback" in line]
    return "\n".join(picked[:40])[-6000:] or "\n".join(lines[-40:])


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        return json.loads(urllib.request.urlopen(request, timeout=120).read())
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"{url}: {err}: {err.read().decode()[:2000]}") from err


def ensemble_whole(base: str, prompt: str) -> str:
    body = {"inputs": [
        {"name": "INPUT_0", "shape": [1, 1], "datatype": "BYTES", "data": [prompt]},
        {"name": "INPUT_1", "shape": [1, 1], "datatype": "UINT32", "data": [NEW_TOKENS]},
        {"name": "INPUT_2", "shape": [1, 1], "datatype": "BYTES", "data": [""]},
        {"name": "INPUT_3", "shape": [1, 1], "datatype": "BYTES", "data": [""]},
    ]}  # fmt: skip
    answer = post(f"{base}/v2/models/ensemble/infer", body)
    return next(o for o in answer["outputs"] if o["name"] == "OUTPUT_0")["data"][0]


def ensemble_streamed(base: str, prompt: str) -> list[str]:
    """Triton's generate_stream (server-sent events) on the decoupled ensemble: each event's text."""
    body = {"INPUT_0": prompt, "INPUT_1": NEW_TOKENS, "INPUT_2": "", "INPUT_3": ""}
    request = urllib.request.Request(f"{base}/v2/models/ensemble/generate_stream", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})  # fmt: skip
    texts = []
    with urllib.request.urlopen(request, timeout=120) as stream:
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("data:"):
                event = json.loads(line[len("data:") :])
                if "error" in event:
                    raise RuntimeError(f"generate_stream: {event['error']}")
                value = event.get("OUTPUT_0")
                while isinstance(value, list):  # [beam] or [batch, beam] as the server shapes it
                    value = value[0]
                texts.append(value)
    return texts


def ft_infer(base: str, ids: list, eos: int, **extra) -> dict:
    """The fastertransformer model, as the backend's own clients call it ([batch, 1] scalars)."""
    scalars = {"input_lengths": ("UINT32", len(ids)), "request_output_len": ("UINT32", NEW_TOKENS),
               "start_id": ("UINT32", eos), "end_id": ("UINT32", eos), **extra}  # fmt: skip
    inputs = [{"name": "input_ids", "shape": [1, len(ids)], "datatype": "UINT32", "data": ids}]
    inputs += [{"name": k, "shape": [1, 1], "datatype": t, "data": [v]} for k, (t, v) in scalars.items()]
    answer = post(f"{base}/v2/models/fastertransformer/infer", {"inputs": inputs})
    return {o["name"]: o for o in answer["outputs"]}


def new_beams(answer: dict, prompt_len: int) -> list:
    ids, lengths = answer["output_ids"], answer["sequence_length"]["data"]
    width, total = ids["shape"][1], ids["shape"][2]
    return [ids["data"][b * total + prompt_len : b * total + lengths[b]] for b in range(width)]


def check_family(args, family: str, work: Path) -> dict:
    ckpt = work / family / "checkpoint"
    model, tokenizer, eos = make_checkpoint(family, ckpt, lab=args.lab)
    ids = tokenizer.encode(PROMPT_TEXT)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos)[0].tolist()  # fmt: skip
    expected_new = out[len(ids) :]
    result = {"family": family, "prompt_ids": ids, "transformers": expected_new,
              "transformers_text": tokenizer.decode(out), "_tokenizer": tokenizer}  # fmt: skip
    for variant in ("whole", "decoupled"):
        rendered = args.repos / variant / family
        repo = Path(str(args.device_root)) / "repos" / variant / family  # the paths config.pbtxt names
        shutil.rmtree(repo, ignore_errors=True)
        shutil.copytree(rendered, repo)
        shutil.rmtree(Path(str(args.device_root)) / "ckpt" / family, ignore_errors=True)
        shutil.copytree(ckpt, Path(str(args.device_root)) / "ckpt" / family)
        shards = check.convert(ckpt, repo / "fastertransformer" / "1", family, args.tp, "fp32", log=lambda _m: None)
        started = time.monotonic()
        with tritonserver(args, repo, work) as (base, grpc, log):
            result[f"{variant}_ready_s"] = round(time.monotonic() - started, 1)
            if variant == "whole":
                result["ensemble_text"] = ensemble_whole(base, PROMPT_TEXT)
                greedy = ft_infer(base, ids, eos, runtime_top_k=("UINT32", 1), is_return_log_probs=("BOOL", True))
                result["ft"] = new_beams(greedy, len(ids))[0]
                stand_in = check.load(shards)
                steps = list(stand_in.steps(ids, NEW_TOKENS, end_id=eos))
                result["stand_in"] = [s.token for s in steps]
                result["cum_log_prob"] = {"ft": greedy["cum_log_probs"]["data"][0], "stand_in": steps[-1].cum_log_prob}
                # The gateway's greedy with log probabilities: FT's top-p path with a tiny p.
                tiny = ft_infer(base, ids, eos, runtime_top_k=("UINT32", 0), runtime_top_p=("FP32", 1e-6),
                                is_return_log_probs=("BOOL", True))  # fmt: skip
                result["ft_top_p_tiny"] = {k: {"shape": v["shape"], "data": v["data"][:64]} for k, v in tiny.items()}
                penal = ft_infer(base, ids, eos, runtime_top_k=("UINT32", 1), repetition_penalty=("FP32", 1.3))
                result["ft_penalty"] = new_beams(penal, len(ids))[0]
                result["stand_in_penalty"] = stand_in.generate(ids, NEW_TOKENS, repetition_penalty=1.3, end_id=eos)
                # Reported, not judged: where the greedy tokens repeat nothing, a penalty changes none.
                result["penalty_changed_tokens"] = result["ft_penalty"] != result["ft"]
                beam = ft_infer(base, ids, eos, beam_width=("UINT32", 2), len_penalty=("FP32", 1.0))
                result["ft_beam2"] = new_beams(beam, len(ids))
                found = stand_in.beam_search(ids, NEW_TOKENS, 2, len_penalty=1.0, end_id=eos)
                result["stand_in_beam2"] = [b.tokens[len(ids) :] for b in found]
            else:
                result["streamed_texts"] = ensemble_streamed(base, PROMPT_TEXT)
            if args.gateway_python:
                target = Target(family, grpc, Path(str(args.device_root)) / "ckpt" / family, work)
                greedy = expected_text(tokenizer, ids, expected_new)
                for mode in ("local", "remote"):
                    answers = ask_gateway(args, target, local=mode == "local", greedy=greedy)
                    result.setdefault("gateway", {})[f"{variant}/{mode}"] = answers
                result.setdefault("padded_rounds", {})[variant] = padded_rounds(args, target)
            said = log.read_text()
            result[f"{variant}_backend_loaded"] = "TRITONBACKEND_ModelInitialize: fastertransformer" in said or (
                "successfully loaded 'fastertransformer'" in said
            )
    return result


def expected_text(tokenizer, ids: list, new: list) -> str:
    """A completion's text as the gateway answers it: the new tokens' text, special tokens left out."""
    prompt = tokenizer.decode(ids, skip_special_tokens=True)
    return tokenizer.decode(list(ids) + list(new), skip_special_tokens=True)[len(prompt) :]


def stop_for(text: str) -> str:
    """A stop sequence the greedy answer holds past its start: its second word (the gateway
    refuses commas in stop sequences), or three characters from its middle."""
    words = [w for w in text.replace(",", " ").split() if w]
    if len(words) > 1:
        return words[1]
    middle = text.replace(",", "")[len(text) // 2 : len(text) // 2 + 3]
    return middle if middle.strip() else ""


class Target(NamedTuple):
    """What a gateway serves: the family (its model name), tritonserver's gRPC address, the
    checkpoint's directory (its tokenizer) and where its files go."""

    family: str
    grpc: str
    checkpoint: Path
    work: Path


@contextlib.contextmanager
def gateway(args, target: Target, *, local: bool, **settings_over):
    """The project's gateway on 127.0.0.1 in front of the target's tritonserver (its settings
    file's keys in `settings_over` replace this check's)."""
    family, grpc, checkpoint, work = target
    port = free_port()
    settings = work / f"gateway-{family}-{port}.json"
    settings.write_text(json.dumps({
        "model": family, "triton_grpc": grpc, "context_length": 128, "max_tokens_limit": 64,
        "allow_anonymous": True, "request_timeout_s": 120.0,
        "tokenizer_dir": str(checkpoint) if local else "", "checkpoint_dir": str(checkpoint), **settings_over,
    }))  # fmt: skip
    log = work / f"gateway-{family}-{port}.log"
    env = {**os.environ, "PYTHONPATH": str(args.gateway_app), "HF_HUB_OFFLINE": "1"}
    argv = [str(args.gateway_python / "bin" / "python3"), "-m", "ftgateway", "--config", str(settings),
            "--port", str(port)]  # fmt: skip
    ready = f"http://127.0.0.1:{port}/healthz"
    said = lambda: f"the gateway did not become ready:\n{log.read_text()[-3000:]}"  # noqa: E731
    with running(argv, env, log, work, ready=ready, seconds=90, failure=said):
        yield f"http://127.0.0.1:{port}/v1", log


def ask_gateway(args, target: Target, *, local: bool, greedy: str) -> dict:
    """The openai client's answers through the gateway (gateway_client.py in --client-python)."""
    stop, family = stop_for(greedy), target.family
    # Slices of 4 (rounds, ftgateway/rounds.py): the 16-token answers come in 4 slices each, so every
    # verdict on them (greedy = transformers, streamed = whole, log probabilities, the penalty)
    # holds for rounds on FT itself.
    with gateway(args, target, local=local, slice_tokens=4) as (base, log):
        argv = [str(args.client_python / "bin" / "python3"), str(HERE / "gateway_client.py"), "--base", base,
                "--model", family, "--prompt", PROMPT_TEXT, "--tokens", str(NEW_TOKENS), "--stop", stop]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"gateway_client.py failed: {done.stderr[-3000:]}\ngateway: {log.read_text()[-3000:]}")
    found = json.loads(done.stdout)
    if found["errors"]:
        found["gateway_log"] = log.read_text(errors="replace")[-4000:]
    return {"stop_sequence": stop, **found}


def padded_rounds(args, target: Target) -> dict:
    """Three greedy completions of different prompt lengths at once, through a gateway in slices of
    4 (from the second round on, each slice's input right-padded to the round's longest, with its
    own input_lengths: ftgateway/rounds.py) and through one without rounds: the texts."""
    prompts = [PROMPT_TEXT + " and then one more", PROMPT_TEXT, PROMPT_TEXT[:9]]

    def ask(base: str, prompt: str) -> str:
        body = json.dumps({"model": target.family, "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0})
        request = urllib.request.Request(base + "/completions", body.encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as answer:
            return json.load(answer)["choices"][0]["text"]

    found = {}
    for slices in (0, 4):
        with gateway(args, target, local=True, slice_tokens=slices) as (base, _log), \
             concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:  # fmt: skip
            found[f"slices {slices}"] = list(pool.map(lambda prompt, base=base: ask(base, prompt), prompts))
    return found


def gateway_verdicts(r: dict) -> dict:
    """Every gateway run (whole/decoupled repository x local/remote tokenizing) against transformers
    and the stand-in, decoded as the gateway answers."""
    tok = r["_tokenizer"]
    ids = r["prompt_ids"]
    greedy = expected_text(tok, ids, r["transformers"])
    penalty = expected_text(tok, ids, r["stand_in_penalty"])
    beams = [expected_text(tok, ids, b) for b in r["stand_in_beam2"]]
    runs = r["gateway"].items()

    def cut(run: dict) -> dict:
        stop = run["stop_sequence"]
        return {"text": greedy[: greedy.find(stop)], "finish_reason": "stop"} if stop in greedy else run.get("stop")

    return {
        "gateway: every request answered": not any(run["errors"] for _, run in runs),
        "gateway: models lists it": all(run.get("models") == [r["family"]] for _, run in runs),
        "gateway: greedy = transformers": all(run.get("greedy", {}).get("text") == greedy for _, run in runs),
        "gateway: streamed = whole": all("".join(run.get("streamed", ["-"])) == greedy for _, run in runs),
        "gateway: decoupled streams in pieces": all(
            len(run.get("streamed", [])) > 1 for k, run in runs if k.startswith("dec")
        ),
        "gateway: penalty = stand-in": all(run.get("penalty") == penalty for _, run in runs),
        "gateway: beam 2 = stand-in": all(run.get("beam2") == beams for _, run in runs),
        "gateway: log prob within tolerance": all(
            "logprobs" in run
            and run["logprobs"]["text"] == greedy
            and abs(sum(run["logprobs"]["token_logprobs"]) - r["cum_log_prob"]["stand_in"])
            <= LOGPROB_TOLERANCE * NEW_TOKENS
            for _, run in runs
        ),
        "gateway: stop = stand-in cut": all(run.get("stop") == cut(run) for _, run in runs),
        "gateway: padded rounds = whole": all(
            found["slices 4"] == found["slices 0"] and all(found["slices 0"]) for found in r["padded_rounds"].values()
        ),
    }


def verdicts(r: dict) -> dict:
    found = {
        "ensemble text = transformers": r["ensemble_text"] == r["transformers_text"],
        "FT ids = transformers": r["ft"] == r["transformers"],
        "FT ids = stand-in": r["ft"] == r["stand_in"],
        "penalty = stand-in": r["ft_penalty"] == r["stand_in_penalty"],
        "beam 2 = stand-in": r["ft_beam2"] == r["stand_in_beam2"],
        "log prob within tolerance": abs(r["cum_log_prob"]["ft"] - r["cum_log_prob"]["stand_in"])
        <= LOGPROB_TOLERANCE * NEW_TOKENS,
        "streamed: several events": len(r["streamed_texts"]) > 1,
        "streamed: last = whole": bool(r["streamed_texts"]) and r["streamed_texts"][-1] == r["ensemble_text"],
    }
    if "gateway" in r:
        found.update(gateway_verdicts(r))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tritonserver", type=Path, required=True, help="the wheel's tritonserver folder")
    parser.add_argument("--backends", type=Path, required=True, help="backends/: fastertransformer and python")
    parser.add_argument("--libs", type=Path, nargs="+", required=True, help="LD_LIBRARY_PATH for tritonserver")
    parser.add_argument("--repos", type=Path, required=True, help="rendered repositories: whole/F and decoupled/F")
    parser.add_argument("--device-root", type=Path, required=True, help="the root the rendered paths name")
    parser.add_argument("--stub-python", type=Path, required=True, help="a virtualenv for the Python backend's stub")
    parser.add_argument("--gateway-python", type=Path, default=None, help="the gateway's virtualenv (none: no gateway)")
    parser.add_argument("--gateway-app", type=Path, default=None, help="ftgateway.zip (roles/gateway/files/pack-app)")
    parser.add_argument("--client-python", type=Path, default=None, help="a virtualenv with the openai package")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--families", default="gpt,gptj,gptneox,bloom")
    parser.add_argument("--tp", type=int, default=1, help="the tensor-parallel size the repositories were rendered for")
    lab_models = ", ".join(f"{family} {name}" for family, name in LAB_MODELS.items())
    parser.add_argument("--lab", action="store_true", help=f"the lab's own models (lab/models: {lab_models})")
    args = parser.parse_args()
    if args.lab and set(args.families.split(",")) - set(LAB_MODELS):
        parser.error(f"--lab serves the families the lab has a model of: {','.join(LAB_MODELS)}")
    if args.gateway_python and not (args.gateway_app and args.client_python):
        parser.error("--gateway-python needs --gateway-app and --client-python")
    results, failed = [], False
    with tempfile.TemporaryDirectory(prefix="ftfleet-stack-") as tmp:
        for family in args.families.split(","):
            try:
                result = check_family(args, family, Path(tmp))
                result["verdicts"] = verdicts(result)
                result.pop("_tokenizer", None)
            except Exception as err:  # every family is reported, a failing one included
                result = {"family": family, "error": f"{type(err).__name__}: {err}"}
            results.append(result)
            print(json.dumps(result), flush=True)
    names = list(next((r["verdicts"] for r in results if "verdicts" in r), {}))
    print("\n| family | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for r in results:
        if "error" in r:
            failed = True
            print(f"| {r['family']} | {r['error'][:300]} |")
            continue
        marks = ["yes" if r["verdicts"][n] else "NO" for n in names]
        failed |= "NO" in marks
        print(f"| {r['family']} | " + " | ".join(marks) + " |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "stack.json").write_text(json.dumps(results, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
