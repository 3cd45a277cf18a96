"""The real stack measured on a GPU at real models' sizes (scripts/ft-gpu-check stack --steps perf):
for each shape, a checkpoint with random fp16 weights is made here (no download), converted by
ftnative.convert (its seconds and peak RSS), served by tritonserver with the backend the recipe
built and the repository roles/triton_model_repo rendered (fp16, decoupled, dynamic batching:
tests/gpu/render.yml's perf set), and measured by the project's bench (ftfleet/bench.py: its
Level and run_levels) at each prompt/answer length and concurrency:

- "Triton (fastertransformer, gRPC)": the backend's model over gRPC streaming, the prompt's ids in;
- "Triton (ensemble, gRPC)": the ensemble (the tokenizing Python models around it), text in;
- "gateway -> Triton": the project's gateway (OpenAI completions, streamed) in front of the same
  tritonserver, tokenizing itself as the role's default does;

beside the "before" (transformers' greedy generate() on the same GPU in fp16, the same lengths,
one batch of `concurrency` prompts) and the floor (a decoding step reads every weight once: weight
bytes / the card's copy bandwidth, measured in the same run).

The weights are random, so that every answer is as long as asked, the output embedding's rows
of every id outside the lab tokenizer's 382 and of the end id are zero (their logit is 0; the
largest of 381 random logits is above 0): greedy never ends early and every token decodes to
text. The rows are still read by every step's GEMM: the work is the shape's.

    python3 tests/gpu/perf.py --tritonserver DIR --backends DIR --libs DIR... --repos DIR
        --device-root DIR --stub-python VENV --gateway-python VENV --gateway-app ZIP
        [--shapes gptj-6b,gpt2-medium] [--lengths 128/128,512/256] [--concurrency 1,4,16,64] [--out DIR]

Writes perf-<shape>.json under --out and prints each level as it is measured.

--sweep NAME,... measures instead the serving settings a host's inventory chooses (the sweep's
VARIANTS: dynamic batching off, its queue delay, max_batch_size, gemm_config.in from gpt_gemm
--gemm): for each, the shape's fastertransformer model alone (no ensemble) is served with that
config.pbtxt and working directory and measured straight over gRPC at each length and concurrency
(the gateway adds the same on every variant); writes perf-sweep-<shape>.json.

--guidellm VENV measures the gateway with GuideLLM as well (tests/gpu/guidellm_run.py: synthetic
prompts of each length, ignore_eos, one run per concurrency), after the project's bench, into the
shape's "guidellm" key; with --guidellm-only, GuideLLM alone (the project's bench and
transformers' baseline left out: their figures are the earlier runs').
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import guidellm_run  # noqa: E402 - GuideLLM, the standard benchmark, through the gateway (--guidellm)
import stack  # noqa: E402 - the real stack's servers (tritonserver, the gateway)

torch, transformers, ROOT = stack.torch, stack.transformers, stack.ROOT
TOKENIZER = stack.TOKENIZER

# name: (family, the transformers config's arguments)
GPTJ_6B = {"model_type": "gptj", "n_layer": 28, "n_embd": 4096, "n_head": 16, "rotary_dim": 64, "vocab_size": 50400,
           "n_positions": 2048}  # fmt: skip
GPT2_MEDIUM = {"model_type": "gpt2", "n_layer": 24, "n_embd": 1024, "n_head": 16, "vocab_size": 50257,
               "n_positions": 1024}  # fmt: skip
SHAPES = {"gptj-6b": ("gptj", GPTJ_6B), "gpt2-medium": ("gpt", GPT2_MEDIUM)}

# The sweep's variants of the perf set's fastertransformer config (max_batch_size 128, dynamic
# batching with a 100 us queue delay: roles/triton_model_repo's defaults but dynamic batching):
# name -> what changes. "gemm" serves with the gemm_config.in that gpt_gemm wrote for the sweep's
# first concurrency as the batch and the prompt's length as the input (ft_gemm_tune's arguments).
VARIANTS = {
    "perf-set": {},
    "no-dynamic-batching": {"dynamic_batching": False},
    "delay-1ms": {"delay_us": 1000},
    "delay-10ms": {"delay_us": 10000},
    "batch-16": {"max_batch_size": 16},
    "batch-32": {"max_batch_size": 32},
    "gemm-tuned": {"gemm": True},
}


def lab_vocab() -> tuple[int, int]:
    """The lab tokenizer's vocabulary size and end id."""
    config = json.loads((TOKENIZER / "config.json").read_text())
    return config["vocab_size"], config["eos_token_id"]


def make_checkpoint(shape: str, where: Path) -> tuple:
    """The shape's model with random fp16 weights on the GPU (seed 0), saved as transformers saves it,
    with the lab's tokenizer; (model, weight bytes, seconds)."""
    kwargs = SHAPES[shape][1]
    known, eos = lab_vocab()
    config = transformers.AutoConfig.for_model(**kwargs, bos_token_id=eos, eos_token_id=eos)
    began = time.monotonic()
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float16).eval()
    with torch.no_grad():
        out = model.get_output_embeddings()
        for rows in (slice(known, None), slice(eos, eos + 1)):
            out.weight[rows] = 0
            if getattr(out, "bias", None) is not None:
                out.bias[rows] = 0
    model.save_pretrained(where, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, where / name)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return model, weight_bytes, round(time.monotonic() - began, 1)


def checkpoint_made(shape: str, where: Path) -> tuple:
    """The shape's checkpoint on disk: the one an earlier call on this machine made (so that one
    shape's lengths can be measured in separate calls), or make_checkpoint's; (the model when this
    call made it, else None; weight bytes; seconds, None when reused)."""
    made = where / "perf-made.json"
    if made.exists() and json.loads(made.read_text())["config"] == SHAPES[shape][1]:
        return None, json.loads(made.read_text())["weight_bytes"], None
    shutil.rmtree(where, ignore_errors=True)
    model, weight_bytes, seconds = make_checkpoint(shape, where)
    made.write_text(json.dumps({"config": SHAPES[shape][1], "weight_bytes": weight_bytes, "seconds": seconds}))
    return model, weight_bytes, seconds


def checkpoint_of(shape: str, where: Path) -> tuple:
    """checkpoint_made's, with the model on the GPU either way (loaded when reused)."""
    model, weight_bytes, seconds = checkpoint_made(shape, where)
    if model is None:
        model = transformers.AutoModelForCausalLM.from_pretrained(where, torch_dtype=torch.float16).cuda().eval()
    return model, weight_bytes, seconds


def copy_bandwidth() -> float:
    """The card's device-to-device copy bandwidth in bytes/s (read + write), best of 10 copies of 4 GiB."""
    src = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1000)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (4 << 30) / best


def prompt_of(tokenizer, length: int, seed: int) -> tuple[str, list[int]]:
    """A prompt text of `length` tokens (as the tokenizer reads it back) from random ids."""
    known, eos = lab_vocab()
    rng = random.Random(seed)
    ids = [rng.randrange(known) for _ in range(2 * length)]
    ids = [i for i in ids if i != eos]
    text = tokenizer.decode(ids)
    for _ in range(5):  # decoded and read back, byte-level merges change the count: trim until stable
        ids = tokenizer.encode(text)[:length]
        text = tokenizer.decode(ids)
        if tokenizer.encode(text) == ids:
            break
    return text, tokenizer.encode(text)


def baseline(model, ids: list[int], tokens: int, levels: list[int]) -> list[dict]:
    """transformers' greedy generate() on the GPU, one batch of `concurrency` copies of the prompt:
    the tutorial's "before" at the same lengths."""
    results = []
    for concurrency in levels:
        batch = torch.tensor([ids] * concurrency, device="cuda")
        run = lambda batch=batch: model.generate(batch, attention_mask=torch.ones_like(batch),  # noqa: E731
                                                 max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                                                 pad_token_id=0)  # fmt: skip
        with torch.no_grad():
            run()  # warm-up
            times = []
            for _ in range(2):
                torch.cuda.synchronize()
                began = time.perf_counter()
                run()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - began)
        best = min(times)
        results.append({"concurrency": concurrency, "requests": 2 * concurrency, "latency_ms": round(1000 * best, 1),
                        "itl_ms": round(1000 * best / tokens, 2), "requests_per_s": round(concurrency / best, 2),
                        "output_tokens_per_s": round(concurrency * tokens / best, 1)})  # fmt: skip
        print(json.dumps({"transformers generate()": results[-1]}), flush=True)
    return results


RSS_OF_CONVERT = """
import resource, sys
from ftnative.convert import main
code = main(sys.argv[1:])
mine, workers = (resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print(f"peak-rss {mine} {workers}", file=sys.stderr)
sys.exit(code)
"""


def convert(ckpt: Path, out: Path, family: str, weight_dtype: str) -> dict:
    """ftnative.convert (its command line) in a process of its own: its seconds, and the peak RSS
    of that process and of its largest worker (getrusage, kB)."""
    began = time.monotonic()
    argv = [sys.executable, "-c", RSS_OF_CONVERT, "-i", str(ckpt), "-o", str(out), "--family", family,
            "--tp", "1", "--weight-dtype", weight_dtype, "-q"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise RuntimeError(f"ftnative.convert failed: {done.stderr[-3000:]}")
    seconds = round(time.monotonic() - began, 1)
    mine, worker = (int(n) * 1024 for n in done.stderr.split("peak-rss ")[1].split()[:2])
    written = sum(f.stat().st_size for f in (out / "1-gpu").iterdir())
    return {"seconds": seconds, "peak_rss_gb": round(mine / 1e9, 2), "worker_peak_rss_gb": round(worker / 1e9, 2),
            "weight_dtype": weight_dtype, "written_gb": round(written / 1e9, 2), "workers": os.cpu_count()}  # fmt: skip


def ft_ids_request(address: str, ids: list[int], tokens: int, end_id: int, generated: list[int]):
    """One greedy request to the fastertransformer model over gRPC streaming (its decoupled
    responses; ftfleet.bench's grpc_stream_request): each answer's new-token count goes to
    `generated`."""
    import numpy as np  # noqa: PLC0415
    import tritonclient.grpc as grpcclient  # noqa: PLC0415

    from ftfleet import bench  # noqa: PLC0415

    tensors = {"input_ids": np.array([ids], dtype=np.uint32), "input_lengths": np.array([[len(ids)]], np.uint32),
               "request_output_len": np.array([[tokens]], np.uint32), "runtime_top_k": np.array([[1]], np.uint32),
               "start_id": np.array([[end_id]], np.uint32), "end_id": np.array([[end_id]], np.uint32)}  # fmt: skip

    def inputs() -> list:
        made = []
        for name, value in tensors.items():
            tensor = grpcclient.InferInput(name, list(value.shape), "UINT32")
            tensor.set_data_from_numpy(value)
            made.append(tensor)
        return made

    def count(result) -> None:
        generated.append(int(result.as_numpy("sequence_length").reshape(-1)[0]) - len(ids))

    return bench.grpc_stream_request(address, "fastertransformer", inputs, "sequence_length", last=count)


def measure(args, grpc: str, gateway_url: str, model: str, *, prompt: tuple[str, list[int]], tokens: int) -> dict:
    """Every layer at every concurrency for one prompt (its text and ids) and answer length
    (ftfleet.bench's run_levels; tritonclient from the gateway's virtualenv, main() adds it)."""
    from ftfleet import bench  # noqa: PLC0415

    text, ids = prompt
    _known, eos = lab_vocab()
    generated: list[int] = []
    layers = {
        "Triton (fastertransformer, gRPC)": ft_ids_request(grpc, ids, tokens, eos, generated),
        "Triton (ensemble, gRPC)": bench.triton_request(grpc, text, tokens),
        "gateway -> Triton": bench.openai_request(gateway_url, "", model, text, tokens),
    }
    try:
        found = bench.run_levels(layers, args.concurrency, requests=8, rounds=1)
    finally:
        for call in layers.values():
            call.close()
    for levels in found.values():
        with_output_tokens(levels, tokens)
    return {"prompt_tokens": len(ids), "output_tokens": tokens, "layers": found,
            "ft_new_tokens": {"min": min(generated, default=None), "max": max(generated, default=None)}}  # fmt: skip


def with_output_tokens(levels: list[dict], tokens: int) -> list[dict]:
    """Each measured level's output tokens/s (every answer has `tokens`: greedy never ends early)."""
    for level in levels:
        if level["requests_per_s"]:
            level["output_tokens_per_s"] = round(level["requests_per_s"] * tokens, 1)
    return levels


def converted_repo(args, shape: str, reused: bool) -> tuple[Path, dict]:
    """The shape's repository of the perf set with ftnative.convert's shards in it (converted again
    unless the checkpoint was reused and an earlier call converted it) and the conversion's record."""
    family = SHAPES[shape][0]
    root = Path(str(args.device_root))
    repo = root / "repos" / "decoupled" / family
    converted = root / f"perf-convert-{shape}.json"
    if not (reused and converted.exists()):
        shutil.rmtree(repo, ignore_errors=True)
        shutil.copytree(args.repos / "decoupled" / family, repo)
        weight_dtype = "fp32" if family == "gptj" else "fp16"  # FT's GPT-J weights are fp32 files (fp16 in memory)
        converted.write_text(json.dumps(convert(root / "ckpt" / family, repo / "fastertransformer" / "1", family,
                                                weight_dtype)))  # fmt: skip
    record = {**json.loads(converted.read_text()), "reused": reused}
    print(json.dumps({"convert": record}), flush=True)
    return repo, record


def measure_shape(args, shape: str, work: Path) -> dict:
    family, kwargs = SHAPES[shape]
    root = Path(str(args.device_root))
    ckpt = root / "ckpt" / family
    # GuideLLM alone needs the shards, not the model on the GPU (no transformers baseline)
    model, weight_bytes, made_s = (checkpoint_made if args.guidellm_only else checkpoint_of)(shape, ckpt)
    reused = made_s is None
    tokenizer = transformers.AutoTokenizer.from_pretrained(ckpt)
    bandwidth = copy_bandwidth()
    result = {"shape": shape, "family": family, "config": kwargs, "checkpoint_seconds": made_s,
              "weight_bytes": weight_bytes, "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1),
              "floor_itl_ms": round(1000 * weight_bytes / bandwidth, 2), "transformers": {}, "stack": {}}  # fmt: skip
    print(json.dumps({k: v for k, v in result.items() if k not in ("transformers", "stack")}), flush=True)
    prompts = {lengths: prompt_of(tokenizer, lengths[0], seed=lengths[0]) for lengths in args.lengths}
    for (prompt_len, tokens), (_text, ids) in prompts.items():
        if not args.guidellm_only:
            result["transformers"][f"{prompt_len}/{tokens}"] = baseline(model, ids, tokens, args.concurrency)
    del model
    torch.cuda.empty_cache()
    repo, result["convert"] = converted_repo(args, shape, reused)
    started = time.monotonic()
    with stack.tritonserver(args, repo, work) as (_base, grpc, _log):
        result["tritonserver_ready_s"] = round(time.monotonic() - started, 1)
        target = stack.Target(family, grpc, ckpt, work)
        settings = {"context_length": 2048 if family == "gptj" else 1024, "max_tokens_limit": 512,
                    "request_timeout_s": 600.0}  # fmt: skip
        with stack.gateway(args, target, local=True, **settings) as (gateway_url, _glog):
            for (prompt_len, tokens), prompt in prompts.items():
                if args.guidellm_only:
                    break
                result["stack"][f"{prompt_len}/{tokens}"] = measure(
                    args, grpc, gateway_url.removesuffix("/v1"), family, prompt=prompt, tokens=tokens
                )
            if args.guidellm:  # the standard tool through the same gateway, after the project's bench
                result["guidellm"] = {
                    f"{prompt_len}/{tokens}": guidellm_run.run(
                        args.guidellm,
                        target=gateway_url.removesuffix("/v1"),
                        model=family,
                        tokenizer=ckpt,
                        prompt_tokens=prompt_len,
                        output_tokens=tokens,
                        concurrency=args.concurrency,
                        work=work,
                    )
                    for prompt_len, tokens in args.lengths
                }
    return result


def variant_config(text: str, change: dict) -> str:
    """The perf set's fastertransformer config.pbtxt with a variant's changes; a line the change
    needs and the config lacks is an error (a renamed template must not measure the default).
    The dynamic batcher is a block (its delay, then the queue's policy): a variant changes its
    delay line, or drops the block to its closing brace."""
    lines = text.splitlines()

    def find(prefix: str) -> int:
        found = [i for i, line in enumerate(lines) if line.strip().startswith(prefix)]
        if len(found) != 1:
            raise RuntimeError(f"config.pbtxt: expected one line starting {prefix!r}, found {len(found)}")
        return found[0]

    if "max_batch_size" in change:
        lines[find("max_batch_size:")] = f"max_batch_size: {change['max_batch_size']}"
    if change.get("dynamic_batching") is False:
        start = end = find("dynamic_batching {")
        depth = 0
        for end in range(start, len(lines)):
            depth += lines[end].count("{") - lines[end].count("}")
            if depth == 0:
                break
        del lines[start : end + 1]
    if "delay_us" in change:
        at = find("max_queue_delay_microseconds:")
        lines[at] = f"  max_queue_delay_microseconds: {change['delay_us']}"
    return "\n".join(lines) + "\n"


def gemm_config(args, shape: str, work: Path, batch: int, input_len: int) -> dict:
    """gpt_gemm with the arguments role ft_gemm_tune computes for the shape, in `work` (where
    tritonserver, started there, reads the gemm_config.in it writes)."""
    from ftdomain.ft.commands import ft_gemm_argv  # noqa: PLC0415
    from ftdomain.ft.model import ft_model_params  # noqa: PLC0415

    family = SHAPES[shape][0]
    config = json.loads((Path(str(args.device_root)) / "ckpt" / family / "config.json").read_text())
    argv = ft_gemm_argv(ft_model_params(config, family), batch, 1, input_len, "fp16", 1, binary=str(args.gemm))
    began = time.monotonic()
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False)
    written = work / "gemm_config.in"
    if done.returncode or not written.is_file() or not written.stat().st_size:
        raise RuntimeError(f"gpt_gemm {argv[1:]} wrote no gemm_config.in (rc {done.returncode}): "
                           f"{(done.stdout + done.stderr)[-2000:]}")  # fmt: skip
    return {"argv": argv[1:], "seconds": round(time.monotonic() - began, 1),
            "entries": len(written.read_text().splitlines())}  # fmt: skip


def sweep_shape(args, shape: str, work: Path) -> dict:
    """Each of --sweep's variants: the fastertransformer model alone, served with the variant's
    config.pbtxt (and gemm_config.in), straight over gRPC at each length and concurrency."""
    from ftfleet import bench  # noqa: PLC0415

    family, kwargs = SHAPES[shape]
    ckpt = Path(str(args.device_root)) / "ckpt" / family
    model, weight_bytes, made_s = checkpoint_made(shape, ckpt)  # the served shards only: no model loaded
    if model is not None:
        del model
        torch.cuda.empty_cache()
    tokenizer = transformers.AutoTokenizer.from_pretrained(ckpt)
    repo, record = converted_repo(args, shape, made_s is None)
    prompts = {lengths: prompt_of(tokenizer, lengths[0], seed=lengths[0]) for lengths in args.lengths}
    _known, eos = lab_vocab()
    result = {"shape": shape, "family": family, "config": kwargs, "weight_bytes": weight_bytes, "convert": record,
              "sweep": {}}  # fmt: skip
    for name in args.sweep:
        change = VARIANTS[name]
        served = work / f"sweep-{name}"
        shutil.rmtree(served, ignore_errors=True)
        (served / "repo").mkdir(parents=True)
        model_dir = served / "repo" / "fastertransformer"
        model_dir.mkdir()
        (model_dir / "1").symlink_to(repo / "fastertransformer" / "1", target_is_directory=True)
        config = variant_config((repo / "fastertransformer" / "config.pbtxt").read_text(), change)
        (model_dir / "config.pbtxt").write_text(config)
        found = {"change": change, "lengths": {}}
        if change.get("gemm"):
            if not args.gemm:
                raise RuntimeError("the gemm-tuned variant needs --gemm (gpt_gemm's path)")
            found["gpt_gemm"] = gemm_config(args, shape, served, args.concurrency[0], args.lengths[0][0])
            print(json.dumps({name: found["gpt_gemm"]}), flush=True)
        started = time.monotonic()
        with stack.tritonserver(args, served / "repo", served) as (_base, grpc, _log):
            found["tritonserver_ready_s"] = round(time.monotonic() - started, 1)
            for (prompt_len, tokens), (_text, ids) in prompts.items():
                generated: list[int] = []
                call = ft_ids_request(grpc, ids, tokens, eos, generated)
                try:
                    print(json.dumps({"variant": name, "lengths": f"{prompt_len}/{tokens}"}), flush=True)
                    levels = bench.run_levels({name: call}, args.concurrency, requests=8, rounds=1)[name]
                finally:
                    call.close()
                with_output_tokens(levels, tokens)
                found["lengths"][f"{prompt_len}/{tokens}"] = {
                    "levels": levels, "ft_new_tokens": {"min": min(generated, default=None),
                                                        "max": max(generated, default=None)}}  # fmt: skip
        result["sweep"][name] = found
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tritonserver", type=Path, required=True)
    parser.add_argument("--backends", type=Path, required=True)
    parser.add_argument("--libs", type=Path, nargs="+", required=True)
    parser.add_argument("--repos", type=Path, required=True, help="tests/gpu/render.yml's perf set: decoupled/F")
    parser.add_argument("--device-root", type=Path, required=True)
    parser.add_argument("--stub-python", type=Path, required=True)
    parser.add_argument("--gateway-python", type=Path, required=True)
    parser.add_argument("--gateway-app", type=Path, required=True)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--lengths", default="128/128,512/256", help="prompt/answer tokens, comma-separated")
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sweep", default="", help=f"variants, comma-separated: {', '.join(VARIANTS)}")
    parser.add_argument("--gemm", type=Path, default=None, help="gpt_gemm (the gemm-tuned variant)")
    parser.add_argument(
        "--guidellm",
        type=Path,
        default=None,
        help="a virtualenv with guidellm: it measures the gateway too, at each length and concurrency",
    )
    parser.add_argument(
        "--guidellm-only",
        action="store_true",
        help="with --guidellm: GuideLLM alone (no transformers baseline, none of the project's bench)",
    )
    args = parser.parse_args()
    if args.guidellm_only and not args.guidellm:
        parser.error("--guidellm-only needs --guidellm VENV")
    unknown = set(args.shapes.split(",")) - set(SHAPES)
    if unknown:
        parser.error(f"--shapes: unknown {sorted(unknown)}; known: {', '.join(SHAPES)}")
    args.sweep = [name for name in args.sweep.split(",") if name]
    unknown = set(args.sweep) - set(VARIANTS)
    if unknown:
        parser.error(f"--sweep: unknown {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    if "gemm-tuned" in args.sweep and not (args.gemm and args.gemm.is_file()):
        parser.error("--sweep gemm-tuned needs --gemm, gpt_gemm's path (ft-gpu-check's build step makes it)")
    args.lengths = [tuple(int(n) for n in pair.split("/")) for pair in args.lengths.split(",")]
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    # tritonclient (the Triton layers' client) from the gateway's virtualenv, after this Python's own
    # packages (torch and transformers keep theirs)
    purelib = subprocess.run([str(args.gateway_python / "bin" / "python3"), "-c",
                              "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    sys.path.append(purelib)
    failed = False
    work = Path(str(args.device_root)) / "perf-work"
    work.mkdir(parents=True, exist_ok=True)
    for shape in args.shapes.split(","):
        try:
            result = sweep_shape(args, shape, work) if args.sweep else measure_shape(args, shape, work)
        except Exception as err:  # every shape is reported, a failing one included
            failed, result = True, {"shape": shape, "error": f"{type(err).__name__}: {err}"}
            print(json.dumps(result), flush=True)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            name = f"perf-sweep-{shape}.json" if args.sweep else f"perf-{shape}.json"
            (args.out / name).write_text(json.dumps(result, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
