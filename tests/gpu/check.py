"""The GPU tier's comparison (scripts/ft-gpu-check run): for each family FT serves through its
Triton model classes, a tiny random checkpoint made here with transformers, converted by the
project's converter (ftnative.convert, fp32 and fp16 weights), run by FasterTransformer's own
C++ (tests/gpu/ftfleet_ft_driver.cc), and its tokens compared with transformers' generate() and
with the project's CPU stand-in (ftnative.decode) on the same shards.

    python3 tests/gpu/check.py --driver BUILD/obj/bin/ftfleet_ft_driver [--out DIR] [--families gpt,gptj]

Prints a Markdown table and writes results.json under --out. Exit status 1 when a comparison
that must hold does not (fp32 greedy equal to transformers and the stand-in; fp16 greedy equal to
the stand-in's fp32 while FT's top logits stay apart; beam search and repetition penalty equal
to the stand-in's; log probabilities within LOGPROB_TOLERANCE)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import transformers  # noqa: E402

from ftnative.convert import convert  # noqa: E402
from ftnative.decode import load  # noqa: E402

VOCAB, LAYERS, HEADS, HEAD_SIZE = 1024, 2, 2, 64  # FT's masked attention takes head sizes 32, 64, 80, ...
HIDDEN = HEADS * HEAD_SIZE
PROMPT = [11, 502, 77, 930, 4, 260, 18]
NEW_TOKENS = 16
END_ID = VOCAB - 1
LOGPROB_TOLERANCE = 2e-3  # fp32: FT's kernels against numpy's float64-accumulated reference

# family -> (FT's model_type, as fastertransformer_backend's config.pbtxt names it; the config)
FAMILIES = {
    "gpt": ("GPT", lambda: transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=128, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, bos_token_id=END_ID,
        eos_token_id=END_ID, initializer_range=0.2)),
    "bloom": ("GPT", lambda: transformers.BloomConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=LAYERS, n_head=HEADS, bos_token_id=END_ID, eos_token_id=END_ID,
        initializer_range=0.2)),
    "gptj": ("GPT-J", lambda: transformers.GPTJConfig(
        vocab_size=VOCAB, n_positions=128, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, rotary_dim=32,
        bos_token_id=END_ID, eos_token_id=END_ID, initializer_range=0.2)),
    "gptneox": ("GPT-NeoX", lambda: transformers.GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=4 * HIDDEN, max_position_embeddings=128, rotary_pct=0.25, bos_token_id=END_ID,
        eos_token_id=END_ID, initializer_range=0.2)),
}  # fmt: skip


def checkpoint(family: str, where: Path) -> Path:
    """A random model of the family (seed 0), saved as transformers saves it."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(FAMILIES[family][1]()).eval()
    model.save_pretrained(where, safe_serialization=True)
    return where


def reference(family: str, where: Path) -> list[int]:
    """transformers' greedy tokens after PROMPT, in fp32."""
    model = transformers.AutoModelForCausalLM.from_pretrained(where, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=END_ID,
                             pad_token_id=END_ID)  # fmt: skip
    return out[0, len(PROMPT) :].tolist()


def request(path: Path, **inputs: tuple[str, list]) -> Path:
    """The driver's request file: input_ids and lengths as the backend receives them, and the
    sampling inputs given (name=(type, values))."""
    lines = [f"input_ids uint32 1 {len(PROMPT)} : {' '.join(map(str, PROMPT))}",
             f"input_lengths uint32 1 : {len(PROMPT)}", f"request_output_len uint32 1 : {NEW_TOKENS}",
             f"end_id uint32 1 : {END_ID}", f"start_id uint32 1 : {END_ID}"]  # fmt: skip
    for name, (kind, values) in inputs.items():
        lines.append(f"{name} {kind} {len(values)} : {' '.join(map(str, values))}")
    path.write_text("\n".join(lines) + "\n")
    return path


def ft_run(driver: Path, model_type: str, data_type: str, shards: Path, req: Path) -> dict:
    done = subprocess.run([str(driver), model_type, data_type, "1", str(shards), str(req)], capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"driver failed ({done.returncode}): {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def beams(answer: dict) -> list[list[int]]:
    """New tokens of each beam (output_ids holds the prompt, then the new tokens, up to sequence_length)."""
    shape, ids = answer["output_ids"]["shape"], answer["output_ids"]["values"]
    lengths = answer["sequence_length"]["values"]
    width, total = shape[1], shape[2]
    return [ids[b * total + len(PROMPT) : b * total + lengths[b]] for b in range(width)]


def check_family(family: str, driver: Path, work: Path) -> dict:
    model_type = FAMILIES[family][0]
    ckpt = checkpoint(family, work / family / "hf")
    expected = reference(family, ckpt)
    result = {"family": family, "model_type": model_type, "transformers_fp32": expected}
    for weight_dtype in ("fp32", "fp16"):
        shards = convert(ckpt, work / family / weight_dtype, family, 1, weight_dtype, log=lambda _m: None)
        stand_in = load(shards)
        ours = stand_in.generate(PROMPT, NEW_TOKENS, end_id=END_ID)
        greedy = ft_run(driver, model_type, weight_dtype, shards,
                        request(work / "greedy.txt", runtime_top_k=("uint32", [1]),
                                is_return_log_probs=("bool", [1])))  # fmt: skip
        got = beams(greedy)[0]
        result[f"ft_{weight_dtype}"] = got
        result[f"stand_in_{weight_dtype}"] = ours
        steps = list(stand_in.steps(PROMPT, NEW_TOKENS, end_id=END_ID))
        if greedy.get("cum_log_probs") and got == [s.token for s in steps]:
            result[f"cum_log_prob_{weight_dtype}"] = {"ft": greedy["cum_log_probs"]["values"][0],
                                                      "stand_in": steps[-1].cum_log_prob}  # fmt: skip
        if weight_dtype == "fp32":
            penalised = ft_run(driver, model_type, "fp32", shards,
                               request(work / "penalty.txt", runtime_top_k=("uint32", [1]),
                                       repetition_penalty=("fp32", [1.3])))  # fmt: skip
            result["ft_penalty_fp32"] = beams(penalised)[0]
            result["stand_in_penalty_fp32"] = stand_in.generate(
                PROMPT, NEW_TOKENS, repetition_penalty=1.3, end_id=END_ID
            )
            searched = ft_run(
                driver,
                model_type,
                "fp32",
                shards,
                request(work / "beam.txt", beam_width=("uint32", [2]), len_penalty=("fp32", [1.0])),
            )
            result["ft_beam2_fp32"] = beams(searched)
            found = stand_in.beam_search(PROMPT, NEW_TOKENS, 2, len_penalty=1.0, end_id=END_ID)
            result["stand_in_beam2_fp32"] = [b.tokens[len(PROMPT) :] for b in found]
    return result


def verdicts(r: dict) -> dict[str, bool]:
    found = {
        "fp32 greedy = transformers": r["ft_fp32"] == r["transformers_fp32"],
        "fp32 greedy = stand-in": r["ft_fp32"] == r["stand_in_fp32"],
        "fp16 greedy = stand-in fp16": r["ft_fp16"] == r["stand_in_fp16"],
        "repetition penalty = stand-in": r["ft_penalty_fp32"] == r["stand_in_penalty_fp32"],
        "beam 2 = stand-in": r["ft_beam2_fp32"] == r["stand_in_beam2_fp32"],
    }
    if "cum_log_prob_fp32" in r:
        lp = r["cum_log_prob_fp32"]
        found["log probs within tolerance"] = abs(lp["ft"] - lp["stand_in"]) <= LOGPROB_TOLERANCE * NEW_TOKENS
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--families", default=",".join(FAMILIES))
    args = parser.parse_args()
    results, failed = [], False
    with tempfile.TemporaryDirectory(prefix="ftfleet-gpu-") as tmp:
        for family in args.families.split(","):
            try:
                result = check_family(family, args.driver, Path(tmp))
                result["verdicts"] = verdicts(result)
            except Exception as err:  # every family is reported, a failing one included
                result = {"family": family, "error": f"{type(err).__name__}: {err}"}
            results.append(result)
            print(json.dumps(result), flush=True)
    print("\n| family | FT model type | " + " | ".join(verdicts_names()) + " |")
    print("|---|---|" + "---|" * len(verdicts_names()))
    for r in results:
        if "error" in r:
            failed = True
            print(f"| {r['family']} | - | {r['error'][:200]} |")
            continue
        marks = [("yes" if r["verdicts"].get(name) else ("-" if name not in r["verdicts"] else "NO"))
                 for name in verdicts_names()]  # fmt: skip
        failed |= "NO" in marks
        print(f"| {r['family']} | {r['model_type']} | " + " | ".join(marks) + " |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    return 1 if failed else 0


def verdicts_names() -> list[str]:
    return ["fp32 greedy = transformers", "fp32 greedy = stand-in", "fp16 greedy = stand-in fp16",
            "repetition penalty = stand-in", "beam 2 = stand-in", "log probs within tolerance"]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
