"""Native FasterTransformer tools: a Hugging Face -> FT converter and a CPU reference decoder.

Both read the model-family registry of ftdomain.ft (families, tensors, layout), the same one the
Ansible filters use, so the converter, the file verification (ft_expected_files) and the decoder agree on
every file name, shape and tensor-parallel split.
"""

__version__ = "1.0.0"
