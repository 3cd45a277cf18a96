"""Property: for any valid (family, shape, tp) the shard files hold exactly the model's parameters.

The parameter count is an independent closed form per family, written here from the model
architectures, not from the registry the files come from.
"""

from __future__ import annotations

import re
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from ftdomain.ft.families import FAMILIES
from ftdomain.ft.layout import ft_expected_files


def closed_form_params(family: str, p: dict) -> int:
    """Number of parameters FT reads for a model of this family and shape."""
    h = p["head_num"] * p["size_per_head"]
    i, v, n = p["inter_size"], p["vocab_size"], p["num_layer"]
    attn = 3 * h * h + h * h  # QKV and attention output weights
    if family == "gptj":  # no attention biases; lm_head with a bias
        return 2 * v * h + v + 2 * h + n * (2 * h + attn + 2 * h * i + i + h)
    gpt_layer = 4 * h + attn + 3 * h + h + 2 * h * i + i + h  # two layernorms, biases everywhere
    if family == "gpt":  # learnt positions, lm_head tied to wte
        return v * h + p["max_pos_seq_len"] * h + 2 * h + n * gpt_layer
    if family == "bloom":  # ALiBi, a layernorm before the decoder, lm_head tied
        return v * h + 4 * h + n * gpt_layer
    if family == "gptneox":  # untied lm_head without bias; parallel residual sums two biases
        out_biases = h if p["use_gptj_residual"] else 2 * h
        return 2 * v * h + 2 * h + n * (4 * h + attn + 3 * h + 2 * h * i + i + out_biases)
    if family == "llama":  # RMSNorm (no bias), gated MLP, no biases at all
        return 2 * v * h + h + n * (2 * h + attn + 3 * h * i)
    raise AssertionError(family)


@st.composite
def models(draw):
    family = draw(st.sampled_from(sorted(FAMILIES)))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    params = {
        "head_num": tp * draw(st.integers(1, 4)),
        "size_per_head": draw(st.sampled_from([2, 4, 8, 16])),
        "inter_size": tp * draw(st.integers(1, 64)),
        "num_layer": draw(st.integers(1, 4)),
        "vocab_size": draw(st.integers(1, 300)),
        "max_pos_seq_len": draw(st.integers(1, 64)),
        "use_gptj_residual": draw(st.booleans()),
    }
    return family, params, tp, draw(st.sampled_from(FAMILIES[family].weight_dtypes))


@settings(max_examples=300, deadline=None)
@given(models())
def test_shards_hold_exactly_the_model_parameters(model):
    family, params, tp, dtype = model
    files = ft_expected_files(family, params, tp, dtype)
    width = {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]

    names = [f["name"] for f in files]
    assert len(names) == len(set(names)), "a file appears twice"

    # Every split tensor once per rank, ranks 0..tp-1, with equal parts; replicated ones once.
    ranks: dict[str, list[int]] = {}
    sizes: dict[str, set[int]] = {}
    for f in files:
        match = re.fullmatch(r"(.*)\.(\d+)\.bin", f["name"])
        if match and not match.group(1).endswith(("layers", "model")):
            ranks.setdefault(match.group(1), []).append(int(match.group(2)))
            sizes.setdefault(match.group(1), set()).add(f["bytes"])
    for stem, seen in ranks.items():
        assert sorted(seen) == list(range(tp)), f"{stem}: ranks {sorted(seen)}"
        assert len(sizes[stem]) == 1, f"{stem}: ranks of unequal size {sizes[stem]}"
    if tp == 1:
        assert all(seen == [0] for seen in ranks.values())

    # Sizes are whole elements, and all files together are exactly the model's parameters.
    assert all(f["bytes"] > 0 and f["bytes"] % width == 0 for f in files)
    assert sum(f["bytes"] for f in files) == width * closed_form_params(family, params)

    # Every layer carries the same set of tensors.
    per_layer = Counter(re.sub(r"^model\.layers\.\d+\.", "", n) for n in names if n.startswith("model.layers."))
    assert set(per_layer.values()) == {params["num_layer"]}
