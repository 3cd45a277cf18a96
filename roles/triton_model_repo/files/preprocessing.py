"""Triton Python model: prompt text -> token ids for the fastertransformer model.

The tokenizer is loaded from the `tokenizer_dir` parameter of config.pbtxt (the model's own
files, mounted into the serving container), never downloaded at load time. Bad and stop words
come as comma-separated text and go out in FT's [2, n] format (flat ids, then end offsets,
padded with 0 and -1).
"""

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizer_model import TokenizerModel


class TritonPythonModel(TokenizerModel):
    def initialize(self, args):
        super().initialize(args)
        self.pad_id = self.tokenizer.eos_token_id or 0

    @staticmethod
    def _optional_words(request, name, batch):
        """Bad or stop words as text rows; none when the input is absent (optional for GPT-NeoX and LLaMA)."""
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        return tensor.as_numpy() if tensor is not None else np.array([[b""]] * batch, dtype=object)

    def _word_lists(self, rows):
        lists = []
        for row in rows:
            text = b"".join(row).decode() if len(row) else ""
            ids, offsets = [], []
            for word in (w for w in text.split(",") if w):
                ids += self.tokenizer.encode(word, add_special_tokens=False)
                offsets.append(len(ids))
            lists.append((ids, offsets))
        width = max([1] + [max(len(ids), len(offsets)) for ids, offsets in lists])
        out = np.zeros((len(lists), 2, width), dtype=np.int32)
        out[:, 1, :] = -1
        for i, (ids, offsets) in enumerate(lists):
            out[i, 0, : len(ids)] = ids
            out[i, 1, : len(offsets)] = offsets
        return out

    def execute(self, requests):
        responses = []
        for request in requests:
            query = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy()
            output_len = pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN").as_numpy()
            bad = self._optional_words(request, "BAD_WORDS_DICT", len(query))
            stop = self._optional_words(request, "STOP_WORDS_DICT", len(query))
            ids = [self.tokenizer.encode(b"".join(row).decode()) for row in query]
            width = max(len(i) for i in ids)
            padded = np.array([i + [self.pad_id] * (width - len(i)) for i in ids], dtype=np.uint32)
            lengths = np.array([[len(i)] for i in ids], dtype=np.uint32)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("INPUT_ID", padded),
                        pb_utils.Tensor("REQUEST_INPUT_LEN", lengths),
                        pb_utils.Tensor("BAD_WORDS_IDS", self._word_lists(bad)),
                        pb_utils.Tensor("STOP_WORDS_IDS", self._word_lists(stop)),
                        pb_utils.Tensor("REQUEST_OUTPUT_LEN", output_len.astype(np.uint32)),
                        # no prompt-learning tables here: task 0, as upstream's preprocessing sends
                        pb_utils.Tensor("PROMPT_LEARNING_TASK_NAME_IDS", np.zeros((len(query), 1), dtype=np.uint32)),
                    ]
                )
            )
        return responses
