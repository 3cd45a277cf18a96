"""A Triton Python-backend stand-in for the fastertransformer model, on the CPU.

Same inputs and outputs as the FT backend (config.pbtxt written by triton_model_repo; only
`backend` differs): reads the `model_checkpoint_path` parameter, loads that <tp>-gpu directory
with the reference decoder and generates. Used where no GPU and no FT build exist (the lab, the
tests), so the ensemble, the tokenizing models and the clients are the production ones.
Install it as fastertransformer/1/model.py, with a `python_path` parameter naming the directory
that holds ftnative (the backend's interpreter ignores PYTHONPATH).
"""

import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name, default, cast):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else cast(tensor.as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        # The backend's interpreter ignores PYTHONPATH: the path to ftnative comes from config.pbtxt.
        for path in reversed([p for p in params.get("python_path", "").split(":") if p]):
            if path not in sys.path:
                sys.path.insert(0, path)
        from ftnative.decode import load  # noqa: PLC0415 - importable only once the paths are set

        self.model = load(params["model_checkpoint_path"])
        self.end_id = self.model.params.get("end_id")
        config = json.loads(args["model_config"])
        self.decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))

    def execute(self, requests):
        if self.decoupled:  # one response per generated token, then a final flag (FT's streaming)
            for request in requests:
                self._stream(request)
            return None
        return [self._answer(request) for request in requests]

    def _rows(self, request):
        """Per batch row: the prompt's ids, the new tokens asked for, the stop sequences."""
        ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()  # [batch, len]
        lengths = pb_utils.get_input_tensor_by_name(request, "input_lengths").as_numpy().reshape(-1)
        output_len = pb_utils.get_input_tensor_by_name(request, "request_output_len").as_numpy().reshape(len(ids), -1)
        stops = _word_lists(pb_utils.get_input_tensor_by_name(request, "stop_words_list"), len(ids))
        return [(row[: int(length)].tolist(), int(new), stop)
                for row, length, new, stop in zip(ids, lengths, output_len[:, 0], stops, strict=True)]  # fmt: skip

    def _sampling(self, request):
        return {
            "top_k": _scalar(request, "runtime_top_k", 1, int),
            "top_p": _scalar(request, "runtime_top_p", 0.0, float),
            "temperature": _scalar(request, "temperature", 1.0, float),
            "seed": _scalar(request, "random_seed", 0, int),
            "end_id": _scalar(request, "end_id", self.end_id, int),
        }

    def _response(self, sequences, end_id):
        width = max(len(s) for s in sequences)
        pad = end_id if end_id is not None else 0
        output = np.array([[s + [pad] * (width - len(s))] for s in sequences], dtype=np.uint32)
        seq_len = np.array([[len(s)] for s in sequences], dtype=np.uint32)
        return pb_utils.InferenceResponse(
            [
                pb_utils.Tensor("output_ids", output),
                pb_utils.Tensor("sequence_length", seq_len),
                pb_utils.Tensor("cum_log_probs", np.zeros((len(sequences), 1), dtype=np.float32)),
                pb_utils.Tensor("output_log_probs", np.zeros((len(sequences), 1, 1), dtype=np.float32)),
            ]
        )

    def _answer(self, request):
        sampling = self._sampling(request)
        sequences = [prompt + self.model.generate(prompt, new, stop=stop, **sampling)
                     for prompt, new, stop in self._rows(request)]  # fmt: skip
        return self._response(sequences, sampling["end_id"])

    def _stream(self, request):
        sender = request.get_response_sender()
        try:
            sampling = self._sampling(request)
            rows = self._rows(request)
            if len(rows) != 1:
                raise ValueError("streaming takes one sequence per request")
            prompt, new, stop = rows[0]
            sequence = list(prompt)
            for token in self.model.stream(prompt, new, stop=stop, **sampling):
                sequence.append(token)
                sender.send(self._response([sequence], sampling["end_id"]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as err:  # every failure goes back to the client as an error
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)  # fmt: skip


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
