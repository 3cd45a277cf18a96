"""FT's weight-only int8 (int8_mode 1) against fp16 on a GPU (scripts/ft-gpu-check stack --steps
int8): GPT-2 medium's shape with random fp16 weights (perf.py's checkpoint and conversion), its
fastertransformer model served alone by tritonserver with the backend the recipe built, once with
int8_mode 0 and once with 1 (max_batch_size 16, a 10 ms batching delay): the card's memory once
ready against the plan's weights (ftdomain.ft.memory), the greedy tokens of a few prompts (how many
of 32 agree with fp16's), and output tokens per second at 1 and 16 clients (128 prompt tokens,
128 answer tokens: greedy never ends early on perf.py's checkpoints).

    python3 tests/gpu/int8.py --tritonserver DIR --backends DIR --libs DIR... --repos DIR
        --device-root DIR --stub-python VENV [--out DIR]

Writes int8-gpt2-medium.json under --out.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import memory  # noqa: E402 - the served repository, the card's memory
import perf  # noqa: E402 - the checkpoint and its conversion
import stack  # noqa: E402 - the real stack's servers

torch = stack.torch
SHAPE = "gpt2-medium"
PROMPTS = 4  # greedy prompts compared
NEW = 32  # tokens each


def greedy(base: str, ids: list[int], tokens: int, end_id: int) -> list[int]:
    """One greedy request's new token ids (memory.infer_json: Triton's HTTP/JSON protocol)."""
    outputs = memory.infer_json(base, ids, tokens, end_id)
    return outputs["output_ids"][len(ids) : outputs["sequence_length"][0]]


def throughput(base: str, clients: int, end_id: int) -> dict:
    """`clients` threads, 2 requests each of 128 prompt and 128 answer tokens: output tokens/s."""
    made, errors = [], []

    def work(n: int) -> None:
        try:
            for r in range(2):
                made.append(len(greedy(base, [(11 * n + 3 * r + j) % 300 + 1 for j in range(128)], 128, end_id)))
        except (OSError, ValueError, KeyError) as err:  # reported: the level's figure says what failed
            errors.append(f"{type(err).__name__}: {str(err)[:200]}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(clients)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - began
    return {"clients": clients, "requests": 2 * clients, "new_tokens": sum(made), "seconds": round(seconds, 2),
            "output_tokens_per_s": round(sum(made) / seconds, 1), "errors": errors[:3]}  # fmt: skip


def serve(args, repo_dir: Path, work: Path, mode: int, *, end_id: int, before: float) -> dict:
    repo = memory.served_repo(work, repo_dir / "fastertransformer" / "1",
                              (repo_dir / "fastertransformer" / "config.pbtxt").read_text(), 16, f"int8-{mode}",
                              delay_us=10_000, int8_mode=mode)  # fmt: skip
    found: dict = {"int8_mode": mode}
    try:
        with stack.tritonserver(args, repo, work) as (base, _grpc, log):
            found["ready_mib"] = round(memory.used_mib() - before)
            found["greedy"] = [greedy(base, [(7 * p + j) % 300 + 1 for j in range(16)], NEW, end_id)
                               for p in range(PROMPTS)]  # fmt: skip
            found["levels"] = [throughput(base, clients, end_id) for clients in (1, 16)]
            found["peak_mib"] = round(memory.used_mib() - before)
            lines = log.read_text(errors="replace").splitlines()
            found["log_int8_lines"] = [line[-300:] for line in lines if "int8" in line.lower()][-5:]
    except (RuntimeError, OSError) as err:  # tritonserver did not start, or failed: what it said is the result
        found["server_error"] = str(err)[-2000:]
    return found


def main() -> int:
    args = memory.server_arguments(__doc__).parse_args()
    from ftdomain.ft.memory import ft_memory_plan  # noqa: PLC0415
    from ftdomain.ft.model import ft_model_params  # noqa: PLC0415

    root = Path(str(args.device_root))
    work = root / "int8-work"
    work.mkdir(parents=True, exist_ok=True)
    ckpt, repo_dir, convert = memory.shards_of(args, SHAPE)
    params = ft_model_params(json.loads((ckpt / "config.json").read_text()), "gpt")
    end_id = perf.lab_vocab()[1]
    before = memory.used_mib()
    result = {"shape": SHAPE, "card": torch.cuda.get_device_name(0), "convert": convert, "modes": []}
    for mode in (0, 1):
        plan = ft_memory_plan("gpt", params, {"data_type": "fp16", "int8_mode": mode, "max_batch_size": 16,
                                              "context": 1024})  # fmt: skip
        found = serve(args, repo_dir, work, mode, end_id=end_id, before=before)
        found["plan_weights_mib"] = round(plan["bytes"]["weights"] / memory.MIB)
        result["modes"].append(found)
        print(json.dumps(found), flush=True)
    fp16, int8 = (m.get("greedy") for m in result["modes"])
    if fp16 and int8:
        pairs = zip(fp16, int8, strict=True)
        result["greedy_agree"] = [sum(a == b for a, b in zip(x, y, strict=False)) for x, y in pairs]
        result["greedy_of"] = NEW
        print(json.dumps({"greedy_agree": result["greedy_agree"], "of": NEW}), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"int8-{SHAPE}.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all("levels" in m for m in result["modes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
