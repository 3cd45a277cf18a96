"""Realistic config.json contents of the seed models (the keys their Hub repositories carry)."""

GPT2 = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "bos_token_id": 50256,
    "eos_token_id": 50256,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_inner": None,
    "n_layer": 12,
    "n_positions": 1024,
    "vocab_size": 50257,
}

GPTJ_6B = {
    "_name_or_path": "EleutherAI/gpt-j-6B",
    "architectures": ["GPTJForCausalLM"],
    "bos_token_id": 50256,
    "eos_token_id": 50256,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gptj",
    "n_embd": 4096,
    "n_head": 16,
    "n_inner": None,
    "n_layer": 28,
    "n_positions": 2048,
    "rotary_dim": 64,
    "vocab_size": 50400,
}

# KoGPT 6B is GPT-J shaped with a Korean vocabulary of 64512 tokens.
KOGPT_6B = {
    **GPTJ_6B,
    "_name_or_path": "kakaobrain/kogpt",
    "vocab_size": 64512,
    "bos_token_id": 0,
    "eos_token_id": 1,
}

# h2oai/h2ogpt-oig-oasst1-512-6_9b, a Pythia-6.9B (GPT-NeoX) fine-tune.
H2OGPT_6_9B = {
    "architectures": ["GPTNeoXForCausalLM"],
    "bos_token_id": 0,
    "eos_token_id": 0,
    "hidden_act": "gelu",
    "hidden_size": 4096,
    "intermediate_size": 16384,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048,
    "model_type": "gpt_neox",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "rotary_emb_base": 10000,
    "rotary_pct": 0.25,
    "use_parallel_residual": True,
    "vocab_size": 50432,
}

LLAMA_7B = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "rms_norm_eps": 1e-06,
    "vocab_size": 32000,
}

BLOOM_560M = {
    "architectures": ["BloomForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_size": 1024,
    "layer_norm_epsilon": 1e-05,
    "model_type": "bloom",
    "n_head": 16,
    "n_layer": 24,
    "vocab_size": 250880,
}

SEEDS = {
    "gpt2": ("gpt", GPT2),
    "gptj-6b": ("gptj", GPTJ_6B),
    "kogpt-6b": ("gptj", KOGPT_6B),
    "h2ogpt-6.9b": ("gptneox", H2OGPT_6_9B),
    "llama-7b": ("llama", LLAMA_7B),
    "bloom-560m": ("bloom", BLOOM_560M),
}
