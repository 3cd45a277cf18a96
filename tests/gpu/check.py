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
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import transformers  # noqa: E402

from ftdomain.ft.families import FAMILIES as REGISTRY  # noqa: E402
from ftdomain.ft.model import ft_model_params  # noqa: E402
from ftnative.convert import convert  # noqa: E402
from ftnative.decode import load  # noqa: E402

WEIGHT_DTYPES = {family: spec.weight_dtypes for family, spec in REGISTRY.items()}

VOCAB, LAYERS, HEADS, HEAD_SIZE = 1024, 2, 2, 64  # FT's masked attention takes head sizes 32, 64, 80, ...
HIDDEN = HEADS * HEAD_SIZE
PROMPT = [11, 502, 77, 930, 4, 260, 18]
NEW_TOKENS = 16
END_ID = VOCAB - 1
TP = 1  # --tp: the shards' and FT's tensor-parallel size (one thread per GPU, NCCL between them)
LOGPROB_TOLERANCE = 2e-3  # fp32: FT's kernels against numpy's float64-accumulated reference
# The repetition penalty's check needs a case where the penalty changes the tokens (a greedy
# answer that repeats no token, prompt included, is the same with any penalty): the first of these
# (answer length, penalty) where the stand-in's penalised answer differs from its plain one.
PENALTY_TRIES = [(NEW_TOKENS, 1.3), (NEW_TOKENS, 2.0), (NEW_TOKENS, 4.0), (48, 1.3), (48, 2.0), (48, 4.0),
                 (96, 2.0), (96, 8.0)]  # fmt: skip


def penalty_case(stand_in) -> tuple[int, float, list[int], list[int]] | None:
    """PENALTY_TRIES' first case that the stand-in answers differently with the penalty: (length,
    penalty, its plain answer, its penalised answer); None when none does."""
    for new, penalty in PENALTY_TRIES:
        plain = stand_in.generate(PROMPT, new, end_id=END_ID)
        penalised = stand_in.generate(PROMPT, new, repetition_penalty=penalty, end_id=END_ID)
        if penalised != plain:
            return new, penalty, plain, penalised
    return None


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
    # Only in a build of void-main's fork (scripts/ft-gpu-check build --ft its tree): FT has no LLaMA.
    "llama": ("Llama", lambda: transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=3 * HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=128, bos_token_id=END_ID,
        eos_token_id=END_ID, initializer_range=0.2)),
}  # fmt: skip
# FT's own model types; Llama is only in a build of void-main's fork
DEFAULT_FAMILIES = ",".join(family for family, (model_type, _) in FAMILIES.items() if model_type != "Llama")


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


def request(path: Path, new_tokens: int = NEW_TOKENS, **inputs: tuple[str, list]) -> Path:
    """The driver's request file: input_ids and lengths as the backend receives them, and the
    sampling inputs given (name=(type, values))."""
    lines = [f"input_ids uint32 1 {len(PROMPT)} : {' '.join(map(str, PROMPT))}",
             f"input_lengths uint32 1 : {len(PROMPT)}", f"request_output_len uint32 1 : {new_tokens}",
             f"end_id uint32 1 : {END_ID}", f"start_id uint32 1 : {END_ID}"]  # fmt: skip
    for name, (kind, values) in inputs.items():
        lines.append(f"{name} {kind} {len(values)} : {' '.join(map(str, values))}")
    path.write_text("\n".join(lines) + "\n")
    return path


def ft_run(driver: Path, model_type: str, data_type: str, shards: Path, req: Path, *, cwd: Path | None = None) -> dict:
    """FT's answer; `said` holds what FT printed besides it (FT reads gemm_config.in from the
    working directory, as tritonserver does from its own)."""
    done = subprocess.run([str(driver), model_type, data_type, str(TP), str(shards), str(req)], capture_output=True,
                          text=True, timeout=600, check=False, cwd=cwd or req.parent)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"driver failed ({done.returncode}): {done.stderr[-3000:]}")
    lines = done.stdout.strip().splitlines()
    return {**json.loads(lines[-1]), "said": "\n".join(lines[:-1]) + done.stderr}


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
    for data_type in ("fp32", "fp16"):
        # The weights the project writes for this data type (GPT-J's converter writes fp32 only;
        # FT then computes in fp16 from them, as the prod KoGPT group serves).
        weight_dtype = data_type if data_type in WEIGHT_DTYPES[family] else "fp32"
        shards = convert(ckpt, work / family / weight_dtype, family, TP, weight_dtype, log=lambda _m: None)
        stand_in = load(shards)
        ours = stand_in.generate(PROMPT, NEW_TOKENS, end_id=END_ID)
        greedy = ft_run(driver, model_type, data_type, shards,
                        request(work / "greedy.txt", runtime_top_k=("uint32", [1]),
                                is_return_log_probs=("bool", [1])))  # fmt: skip
        got = beams(greedy)[0]
        result[f"weights_{data_type}"] = weight_dtype
        result[f"ft_{data_type}"] = got
        result[f"stand_in_{data_type}"] = ours
        steps = list(stand_in.steps(PROMPT, NEW_TOKENS, end_id=END_ID))
        if greedy.get("cum_log_probs") and got == [s.token for s in steps]:
            result[f"cum_log_prob_{data_type}"] = {"ft": greedy["cum_log_probs"]["values"][0],
                                                      "stand_in": steps[-1].cum_log_prob}  # fmt: skip
        if data_type == "fp32":
            case = penalty_case(stand_in)
            if case is None:
                result["penalty_case"] = f"none of {PENALTY_TRIES} changes the stand-in's answer"
            else:
                new, penalty, plain, expected_penalised = case
                result["penalty_case"] = {"new_tokens": new, "repetition_penalty": penalty}
                greedy_req = request(work / "plain-long.txt", new, runtime_top_k=("uint32", [1]))
                penalty_req = request(work / "penalty.txt", new, runtime_top_k=("uint32", [1]),
                                      repetition_penalty=("fp32", [penalty]))  # fmt: skip
                result["ft_plain_for_penalty_fp32"] = beams(ft_run(driver, model_type, "fp32", shards, greedy_req))[0]
                result["ft_penalty_fp32"] = beams(ft_run(driver, model_type, "fp32", shards, penalty_req))[0]
                result["stand_in_plain_for_penalty_fp32"] = plain
                result["stand_in_penalty_fp32"] = expected_penalised
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
            # The same shards with a wrong layernorm_eps in config.ini: FT reads it, and its tokens change.
            ini = (shards / "config.ini").read_text()
            if re.search(r"^layernorm_eps = ", ini, re.MULTILINE):  # the families whose FT model reads it
                wrong = work / family / "wrong-eps"
                shutil.copytree(shards, wrong)
                (wrong / "config.ini").write_text(re.sub(r"(?m)^layernorm_eps = .*", "layernorm_eps = 0.5", ini))
                result["ft_wrong_eps_fp32"] = beams(ft_run(driver, model_type, "fp32", wrong, work / "greedy.txt"))[0]
                result["stand_in_wrong_eps_fp32"] = load(wrong).generate(PROMPT, NEW_TOKENS, end_id=END_ID)
                result["ft_reads_layernorm_eps"] = result["ft_wrong_eps_fp32"] != result["ft_fp32"]
    return result


def gemm_check(driver: Path, gemm: Path, work: Path) -> dict:
    """FT's gpt_gemm with the arguments role ft_gemm_tune computes (its defaults: batch 8, beam 1,
    input 32; fp16; tp 1) for the tiny GPT-2, then the driver in the directory of the
    gemm_config.in it wrote (FT reads it from the working directory) and in one without it."""
    from ftdomain.ft.commands import ft_gemm_argv  # noqa: PLC0415

    config = json.loads((work / "gpt" / "hf" / "config.json").read_text())
    argv = ft_gemm_argv(ft_model_params(config, "gpt"), 8, 1, 32, "fp16", 1, binary=str(gemm))
    tuned = work / "gemm"
    tuned.mkdir()
    done = subprocess.run(argv, cwd=tuned, capture_output=True, text=True, timeout=600, check=False)
    ran = {"argv": argv[1:], "gpt_gemm_rc": done.returncode, "gpt_gemm_last_lines": done.stdout.splitlines()[-6:],
           "gpt_gemm_stderr": done.stderr[-1500:]}  # fmt: skip
    if not (tuned / "gemm_config.in").is_file() or not (tuned / "gemm_config.in").stat().st_size:
        # FT's cublasAlgoMap exits at "fgets fail" on an empty file: ft_gemm_tune refuses to keep one
        return {**ran, "error": "gpt_gemm wrote no gemm_config.in, or an empty one"}
    shards = work / "gpt" / "fp16" / "1-gpu"
    req = request(work / "gemm-greedy.txt", runtime_top_k=("uint32", [1]))
    with_file = ft_run(driver, "GPT", "fp16", shards, req, cwd=tuned)
    untuned = work / "untuned"
    untuned.mkdir()
    without = ft_run(driver, "GPT", "fp16", shards, req, cwd=untuned)
    table = (tuned / "gemm_config.in").read_text().splitlines()
    return {**ran, "gemm_config_lines": len(table) - 1, "gemm_config_head": table[:4],
            "read_with_file": "gemm_config.in is not found" not in with_file["said"],
            "default_without_file": "gemm_config.in is not found" in without["said"],
            "tokens_tuned": beams(with_file)[0], "tokens_default": beams(without)[0]}  # fmt: skip


def verdicts(r: dict) -> dict[str, bool]:
    found = {
        "fp32 greedy = transformers": r["ft_fp32"] == r["transformers_fp32"],
        "fp32 greedy = stand-in": r["ft_fp32"] == r["stand_in_fp32"],
        "fp16 greedy = stand-in fp16": r["ft_fp16"] == r["stand_in_fp16"],
        # FT's penalised answer equals the stand-in's and differs from FT's plain one at that length
        # (penalty_case): a fork that ignored the penalty would fail here.
        "repetition penalty = stand-in": "ft_penalty_fp32" in r and r["ft_penalty_fp32"] == r["stand_in_penalty_fp32"],
        "repetition penalty changes FT's tokens": "ft_penalty_fp32" in r
        and r["ft_penalty_fp32"] != r["ft_plain_for_penalty_fp32"],
        "beam 2 = stand-in": r["ft_beam2_fp32"] == r["stand_in_beam2_fp32"],
    }
    if "ft_wrong_eps_fp32" in r:  # FT's GPT reads it, its GPT-NeoX ignores it: the stand-in must agree either way
        found["layernorm_eps 0.5: FT = stand-in"] = r["ft_wrong_eps_fp32"] == r["stand_in_wrong_eps_fp32"]
    if "cum_log_prob_fp32" in r:
        lp = r["cum_log_prob_fp32"]
        found["log probs within tolerance"] = abs(lp["ft"] - lp["stand_in"]) <= LOGPROB_TOLERANCE * NEW_TOKENS
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--families", default=DEFAULT_FAMILIES, help=f"of {','.join(FAMILIES)}")
    parser.add_argument("--gemm", type=Path, help="FT's gpt_gemm: tune for the tiny GPT-2, then serve with its file")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (FT built with --multi-gpu for 2+)")
    args = parser.parse_args()
    global TP  # noqa: PLW0603 - one setting for the whole run
    TP = args.tp
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
        if args.gemm and TP == 1 and any(r.get("family") == "gpt" and "error" not in r for r in results):
            try:
                tuned = gemm_check(args.driver, args.gemm, Path(tmp))
            except Exception as err:  # reported with the rest
                tuned = {"error": f"{type(err).__name__}: {err}"}
            print(json.dumps({"gemm": tuned}), flush=True)
            failed |= not (tuned.get("read_with_file") and tuned.get("default_without_file"))
            results.append({"gemm": tuned})
    results_families = [r for r in results if "family" in r]
    print("\n| family | FT model type | " + " | ".join(verdicts_names()) + " |")
    print("|---|---|" + "---|" * len(verdicts_names()))
    for r in results_families:
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
            "repetition penalty = stand-in", "repetition penalty changes FT's tokens", "beam 2 = stand-in",
            "log probs within tolerance",
            "layernorm_eps 0.5: FT = stand-in"]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
