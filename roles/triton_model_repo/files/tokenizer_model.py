"""What the two tokenizing Triton models share (installed beside each model.py; Triton's Python
backend imports from the model's own directory): their config.pbtxt parameters, the extra import
paths of `python_path` (the backend's interpreter ignores PYTHONPATH), and the model's own
tokenizer from `tokenizer_dir`, loaded offline (never downloaded at load time)."""

import json
import os
import sys


class TokenizerModel:
    def initialize(self, args):
        os.environ["HF_HUB_OFFLINE"] = "1"
        self.params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        for path in reversed([p for p in self.params.get("python_path", "").split(":") if p]):
            if path not in sys.path:
                sys.path.insert(0, path)
        from transformers import AutoTokenizer  # noqa: PLC0415 - importable only once the paths are set

        self.tokenizer = AutoTokenizer.from_pretrained(self.params["tokenizer_dir"])
