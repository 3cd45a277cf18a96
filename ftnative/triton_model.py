"""A Triton Python-backend stand-in for the fastertransformer model, on the CPU.

Same inputs and outputs as the FT backend (config.pbtxt written by triton_model_repo; only
`backend` differs): reads the `model_checkpoint_path` parameter, loads that <tp>-gpu directory
with the reference decoder (rank by rank, as FT) and generates as FT's DynamicDecodeLayer does:
ftnative.decode.Model.steps (top-k/top-p with top_p_decay, temperature, repetition penalty, bad
and stop words, end_id, log probabilities), Model.beam_search for beam_width > 1 (len_penalty,
beam_search_diversity_rate). p-tuning prompts are refused by name. Used where no GPU and no FT
build exist (the lab, the tests), so the ensemble, the tokenizing models and the clients are the
production ones. Install it as backends/fastertransformer/model.py, with ftnative importable by
the Python the backend's stub embeds: in its site-packages or named by a .pth file there (that
interpreter is isolated and ignores PYTHONPATH), as lab/tritonserver-cpu.Dockerfile does.
"""

import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

from ftnative.decode import load

# Seconds each step takes at least (0: as fast as the CPU decodes): a GPU's time per token, for
# the tests that must act while a generation runs (tests/test_continuation.py, test_admission.py).
STEP_SECONDS = float(os.environ.get("FTNATIVE_STEP_SECONDS") or 0)
# FT's backend never asks whether a request was cancelled: it decodes to the end. With this set,
# the stand-in asks between streamed steps (request.is_cancelled(), Triton 23.11 and later) and
# stops, as a backend that honours gRPC cancellation does; it shows that a client's leaving
# reaches tritonserver (tests/test_admission.py).
HONOUR_CANCELLATION = os.environ.get("FTNATIVE_HONOUR_CANCELLATION") == "1"


def _scalar(request, name, default, cast):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else cast(tensor.as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        self.model = load(params["model_checkpoint_path"])
        self.end_id = self.model.params.get("end_id")
        config = json.loads(args["model_config"])
        self.decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))
        # sequence_length in the type FT's model of this family answers it (INT32 for GPT, GPT-J and
        # BLOOM, UINT32 for GPT-NeoX and LLaMA): what config.pbtxt declares, which
        # ftdomain/ft/interface.py writes from FT's sources.
        declared = {o["name"]: o["data_type"] for o in config.get("output", [])}
        self.length_dtype = np.int32 if declared.get("sequence_length") == "TYPE_INT32" else np.uint32
        # GPT and BLOOM's FT model (ParallelGpt) also answers response_input_lengths and, when
        # asked, context_embeddings: whatever its config.pbtxt declares.
        self.prompt_tuning = any(o["name"] == "response_input_lengths" for o in config.get("output", []))

    def execute(self, requests):
        if self.decoupled:  # one response per generated token, then a final flag (FT's streaming)
            for request in requests:
                self._stream(request)
            return None
        responses = []
        for request in requests:
            try:
                responses.append(self._answer(request))
            except ValueError as err:  # a request FT refuses: the error goes back to the client
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))))
        return responses

    def _rows(self, request):
        """Per batch row: the prompt's ids, the new tokens asked for, the stop and bad words, and
        how far the row is right-padded past its input_lengths (FT's max_input_length is the
        ids' width: a batch's rows share it)."""
        ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()  # [batch, len]
        lengths = pb_utils.get_input_tensor_by_name(request, "input_lengths").as_numpy().reshape(-1)
        output_len = pb_utils.get_input_tensor_by_name(request, "request_output_len").as_numpy().reshape(len(ids), -1)
        stops = _word_lists(pb_utils.get_input_tensor_by_name(request, "stop_words_list"), len(ids))
        bads = _word_lists(pb_utils.get_input_tensor_by_name(request, "bad_words_list"), len(ids))
        columns = zip(ids, lengths, output_len[:, 0], stops, bads)  # each has len(ids) rows
        width = ids.shape[1]
        return [(row[: int(length)].tolist(), int(new), stop, bad, width - int(length))
                for row, length, new, stop, bad in columns]  # fmt: skip

    def _sampling(self, request):
        """FT's per-request runtime arguments (one value each; FT's defaults where absent)."""
        for name in ("request_prompt_embedding", "request_prompt_lengths", "request_prompt_type"):
            if pb_utils.get_input_tensor_by_name(request, name) is not None:
                raise ValueError(f"{name}: p-tuning prompts are not modelled by the CPU stand-in")
        sent = [n for n in ("repetition_penalty", "presence_penalty") if pb_utils.get_input_tensor_by_name(request, n)]
        if len(sent) == 2:  # BaseSamplingLayer's FT_CHECK: the two penalty types are one argument
            raise ValueError("repetition_penalty and presence_penalty are mutually exclusive: send one of them")
        common = {
            "temperature": _scalar(request, "temperature", 1.0, float),
            "repetition_penalty": _scalar(request, "repetition_penalty", 1.0, float),
            "presence_penalty": _scalar(request, "presence_penalty", 0.0, float),
            "end_id": _scalar(request, "end_id", self.end_id, int),
        }
        beam_width = _scalar(request, "beam_width", 1, int)
        if beam_width < 1:
            raise ValueError(f"beam_width {beam_width}: must be at least 1")
        if beam_width > 1:  # beam search: top_k, top_p and the seed do not apply (DynamicDecodeLayer)
            if _scalar(request, "min_length", 0, int):
                raise ValueError("min_length with beam search is not modelled by the CPU stand-in")
            penalty = _scalar(request, "len_penalty", 0.0, float)
            diversity = _scalar(request, "beam_search_diversity_rate", 0.0, float)
            return beam_width, {**common, "len_penalty": penalty, "diversity_rate": diversity}
        return 1, {
            **common,
            "top_k": _scalar(request, "runtime_top_k", 1, int),
            "top_p": _scalar(request, "runtime_top_p", 0.0, float),
            "seed": _scalar(request, "random_seed", 0, int),
            "top_p_decay": _scalar(request, "top_p_decay", None, float),
            "top_p_min": _scalar(request, "top_p_min", None, float),
            "top_p_reset_id": _scalar(request, "top_p_reset_ids", None, int),
            "min_length": _scalar(request, "min_length", 0, int),
        }

    def _decode(self, row, beam_width, sampling):
        """One row's beams (one without beam search), each (tokens with the prompt, log_probs, cum)."""
        prompt, new, stop, bad, _padding = row
        if beam_width > 1:
            beams = self.model.beam_search(prompt, new, beam_width, stop=stop, bad=bad, **sampling)
            return [(beam.tokens, beam.log_probs, beam.cum) for beam in beams]
        steps = []
        for step in self.model.steps(prompt, new, stop=stop, bad=bad, **sampling):
            time.sleep(STEP_SECONDS)
            steps.append(step)
        return [_as_beam(prompt, steps)]

    def _response(self, prompts, rows, end_id, request_output_len, *, padding, log_probs, context_embeddings=None):
        """FT's outputs, [batch, beam, ...]: each beam's prompt and new tokens (padded with end_id),
        lengths, and when is_return_log_probs is true (as ParallelGptTritonModelInstance adds them
        only then) cum_log_probs and output_log_probs (padded to the tokens asked for, as FT's
        buffer is). A row right-padded past its input_lengths (`padding`, per row) gets FT's
        sequence_length: FT counts every row from the batch's input width (decodingInitialize sets
        max_input_length - 1), while gatherTree moves the row's new tokens to just after its prompt
        and fills the rest with end_id; so the length is the row's tokens plus its padding."""
        beams = len(rows[0])
        lengths = [[len(tokens) + pad for tokens, _, _ in row] for row, pad in zip(rows, padding)]
        width = max(length for row in lengths for length in row)
        fill = end_id if end_id is not None else 0
        output = np.array([[tokens + [fill] * (width - len(tokens)) for tokens, _, _ in row] for row in rows],
                          dtype=np.uint32)  # fmt: skip
        tensors = [
            pb_utils.Tensor("output_ids", output),
            pb_utils.Tensor("sequence_length", np.array(lengths, self.length_dtype)),
        ]
        if log_probs:
            each = np.zeros((len(rows), beams, max(request_output_len, 1)), dtype=np.float32)
            for r, row in enumerate(rows):
                for b, (_, lps, _) in enumerate(row):
                    each[r, b, : len(lps)] = lps
            cum = np.array([[c for *_, c in row] for row in rows], dtype=np.float32)
            tensors += [pb_utils.Tensor("cum_log_probs", cum), pb_utils.Tensor("output_log_probs", each)]
        if self.prompt_tuning:  # GPT, BLOOM: the prompt lengths, and the context's embeddings when asked
            lengths = np.array([[len(prompt)] * beams for prompt in prompts], dtype=np.int32)
            tensors.append(pb_utils.Tensor("response_input_lengths", lengths))
            if context_embeddings is not None:
                tensors.append(pb_utils.Tensor("context_embeddings", context_embeddings))
        return pb_utils.InferenceResponse(tensors)

    def _context_embeddings(self, request, prompts):
        """ParallelGpt with is_return_context_embeddings: the last layer's output summed over the
        context's positions (invokeSumLengthDimension), [batch, hidden]."""
        if not (self.prompt_tuning and _scalar(request, "is_return_context_embeddings", False, bool)):
            return None
        return np.stack([self.model.hidden(prompt).sum(axis=0) for prompt in prompts]).astype(np.float32)

    def _answer(self, request):
        beam_width, sampling = self._sampling(request)
        rows = self._rows(request)
        prompts = [prompt for prompt, *_ in rows]
        decoded = [self._decode(row, beam_width, sampling) for row in rows]
        asked = max(new for _, new, *_ in rows)
        return self._response(
            prompts,
            decoded,
            sampling["end_id"],
            asked,
            padding=[row[-1] for row in rows],
            log_probs=_log_probs(request),
            context_embeddings=self._context_embeddings(request, prompts),
        )

    def _stream(self, request):
        """Decoupled: a response per generated token (beam width 1); with beam search the beams
        change until the last step, so they come in one response at the end."""
        sender = request.get_response_sender()
        try:
            beam_width, sampling = self._sampling(request)
            rows = self._rows(request)
            if len(rows) != 1:
                raise ValueError("streaming takes one sequence per request")
            prompt, new, stop, bad, padding = rows[0]
            embeddings, log_probs = self._context_embeddings(request, [prompt]), _log_probs(request)
            shaped = {"padding": [padding], "log_probs": log_probs, "context_embeddings": embeddings}
            if beam_width > 1:
                decoded = self._decode(rows[0], beam_width, sampling)
                sender.send(self._response([prompt], [decoded], sampling["end_id"], new, **shaped))
            else:
                steps = []
                for step in self.model.steps(prompt, new, stop=stop, bad=bad, **sampling):
                    if HONOUR_CANCELLATION and request.is_cancelled():
                        pb_utils.Logger.log_info(f"ftnative: cancelled after {len(steps)} of {new} steps")
                        break
                    time.sleep(STEP_SECONDS)
                    steps.append(step)
                    beam = _as_beam(prompt, steps)
                    sender.send(self._response([prompt], [[beam]], sampling["end_id"], new, **shaped))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as err:  # every failure goes back to the client as an error
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)  # fmt: skip


def _as_beam(prompt, steps):
    """Sampled steps as one beam: (tokens with the prompt, output_log_probs, cum_log_probs)."""
    return prompt + [s.token for s in steps], [s.log_prob for s in steps], steps[-1].cum_log_prob if steps else 0.0


def _log_probs(request):
    return _scalar(request, "is_return_log_probs", False, bool)


def _word_lists(tensor, batch):
    """FT's [batch, 2, w] word lists (flat ids, then end offsets padded with -1) -> lists of id lists."""
    if tensor is None:
        return [[] for _ in range(batch)]
    out = []
    for ids, ends in tensor.as_numpy().reshape(batch, 2, -1):
        words, begin = [], 0
        for end in (int(e) for e in ends if e >= 0):
            words.append([int(i) for i in ids[begin:end]])
            begin = end
        out.append(words)
    return out
