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

    def execute(self, requests):
        responses = []
        for request in requests:
            ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()  # [batch, len]
            lengths = pb_utils.get_input_tensor_by_name(request, "input_lengths").as_numpy().reshape(-1)
            output_len = (
                pb_utils.get_input_tensor_by_name(request, "request_output_len").as_numpy().reshape(len(ids), -1)
            )
            top_k = _scalar(request, "runtime_top_k", 1, int)
            top_p = _scalar(request, "runtime_top_p", 0.0, float)
            temperature = _scalar(request, "temperature", 1.0, float)
            seed = _scalar(request, "random_seed", 0, int)
            end_id = _scalar(request, "end_id", self.end_id, int)
            sequences = []
            for row, length, new in zip(ids, lengths, output_len[:, 0], strict=True):
                prompt = row[: int(length)].tolist()
                generated = self.model.generate(prompt, int(new), top_k=top_k, top_p=top_p,
                                                temperature=temperature, seed=seed, end_id=end_id)  # fmt: skip
                sequences.append(prompt + generated)
            width = max(len(s) for s in sequences)
            pad = end_id if end_id is not None else 0
            output = np.array([[s + [pad] * (width - len(s))] for s in sequences], dtype=np.uint32)
            seq_len = np.array([[len(s)] for s in sequences], dtype=np.uint32)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("output_ids", output),
                        pb_utils.Tensor("sequence_length", seq_len),
                        pb_utils.Tensor("cum_log_probs", np.zeros((len(ids), 1), dtype=np.float32)),
                        pb_utils.Tensor("output_log_probs", np.zeros((len(ids), 1, 1), dtype=np.float32)),
                    ]
                )
            )
        return responses
