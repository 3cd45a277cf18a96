"""Triton Python model: FT output ids -> text, with the model's own tokenizer (parameter
`tokenizer_dir`). Each beam is decoded up to its `sequence_length` when it comes (upstream's
GPT-NeoX and LLaMA send it; for the other families it is optional), else whole. Upstream's GPT
and BLOOM also send RESPONSE_INPUT_LENGTHS, which they do not use either."""

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizer_model import TokenizerModel


class TritonPythonModel(TokenizerModel):
    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()  # [batch, beam, seq]
            given = pb_utils.get_input_tensor_by_name(request, "sequence_length")
            lengths = (  # [batch, beam]
                given.as_numpy().reshape(tokens.shape[:2])
                if given is not None
                else np.full(tokens.shape[:2], tokens.shape[2], dtype=np.uint32)
            )
            texts = [
                [self.tokenizer.decode(beam[: int(length)].tolist()).encode() for beam, length in zip(row, lens)]
                for row, lens in zip(tokens, lengths)  # lengths: reshaped to tokens' [batch, beam]
            ]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", np.array(texts, dtype=object))]))
        return responses
