"""What the two tokenizing Triton models share (installed beside each model.py; Triton's Python
backend imports from the model's own directory): their config.pbtxt parameters and the model's
own tokenizer from `tokenizer_dir`, loaded offline (never downloaded at load time), by the
transformers of the Python the backend's stub embeds (the serving image's)."""

import json
import os
from pathlib import Path

# LLaMA's conversions made before transformers named the class LlamaTokenizer (4.28), such as
# decapoda-research/llama-7b-hf, spell it LLaMATokenizer, which no transformers knows, ship only
# the SentencePiece tokenizer.model, and leave the special tokens empty (""). The LLaMA guide's
# tokenizing models load LlamaTokenizer directly for that reason; so do these, with LLaMA's own
# special tokens (<unk> 0, <s> 1, </s> 2 in its tokenizer.model) where the config left them empty,
# and the <s> first that LLaMA was trained with.
EARLY_LLAMA = "LLaMATokenizer"
LLAMA_SPECIAL = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
# transformers 5 saves a tokenizer.json-only tokenizer under this class name, which 4.x lacks.
GENERIC_FAST = "TokenizersBackend"


def load_tokenizer(directory: str):
    """The checkpoint's tokenizer, as transformers' AutoTokenizer reads it, or LlamaTokenizer for
    the early LLaMA spelling (needs sentencepiece, as transformers' conversion of tokenizer.model
    does)."""
    config_file = Path(directory) / "tokenizer_config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    if config.get("tokenizer_class") == EARLY_LLAMA:
        from transformers import LlamaTokenizer  # noqa: PLC0415

        empty = {name: value for name, value in LLAMA_SPECIAL.items() if not config.get(name)}
        return LlamaTokenizer.from_pretrained(directory, add_bos_token=config.get("add_bos_token", True), **empty)
    import transformers  # noqa: PLC0415

    if config.get("tokenizer_class") == GENERIC_FAST and not hasattr(transformers, GENERIC_FAST):
        # Saved by transformers 5, served by an image with transformers 4 (pip gives Python 3.8 at
        # most 4.46): the same tokenizer.json through 4.x's generic fast class.
        return transformers.PreTrainedTokenizerFast.from_pretrained(directory)
    return transformers.AutoTokenizer.from_pretrained(directory)


class TokenizerModel:
    def initialize(self, args):
        os.environ["HF_HUB_OFFLINE"] = "1"
        self.params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        self.tokenizer = load_tokenizer(self.params["tokenizer_dir"])
