"""Triton Python model: FT output ids -> text, with the model's own tokenizer (parameter
`tokenizer_dir`). Each beam is decoded up to its sequence length."""

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizer_model import TokenizerModel


class TritonPythonModel(TokenizerModel):
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
