"""Triton Python model: FT output ids -> text, with the model's own tokenizer (parameter
`tokenizer_dir`). Each beam is decoded up to its sequence length."""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        os.environ["HF_HUB_OFFLINE"] = "1"
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        # The backend's interpreter ignores PYTHONPATH: extra import paths come from config.pbtxt.
        for path in reversed([p for p in params.get("python_path", "").split(":") if p]):
            if path not in sys.path:
                sys.path.insert(0, path)
        from transformers import AutoTokenizer  # noqa: PLC0415 - importable only once the paths are set

        self.tokenizer = AutoTokenizer.from_pretrained(params["tokenizer_dir"])

    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()  # [batch, beam, seq]
            lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()  # [batch, beam]
            texts = [
                [
                    self.tokenizer.decode(beam[: int(length)].tolist()).encode()
                    for beam, length in zip(row, lens, strict=True)
                ]
                for row, lens in zip(tokens, lengths, strict=True)
            ]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.array(texts, dtype=object))]))
        return responses
