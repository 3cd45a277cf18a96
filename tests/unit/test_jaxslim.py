"""A slim GPT-J checkpoint (mesh-transformer-jax's, as the GPT-J guide's archive holds it) converts
natively, with numpy alone, to the same shards as the Hugging Face checkpoint of the same weights."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from slimgptj import CONFIG, hf_state, save_hf, slim_arrays, write_slim

from ftnative.convert import ConversionError, convert
from ftnative.jaxslim import SlimCheckpoint, open_checkpoint


def quiet(_message: str) -> None:
    pass


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    root = tmp_path_factory.mktemp("slim")
    state, wte_bias = hf_state(CONFIG)
    save_hf(state, CONFIG, root / "hf")
    return root, state, wte_bias


def slim_dir(root: Path, arrays, name: str = "slim", config: dict = CONFIG, part_size: int = 7) -> Path:
    directory = write_slim(arrays, root / name, part_size)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix in (".bin", ".ini")}


@pytest.mark.parametrize("tp", [1, 2])
def test_slim_shards_equal_the_hugging_face_paths(weights, tmp_path, tp):
    """12 layers (so layer 10 comes after layer 1 in the checkpoint), 8 shards, parts that cut
    layers apart; every FT file, config.ini included, byte for byte."""
    root, state, wte_bias = weights
    slim = slim_dir(tmp_path, slim_arrays(state, wte_bias, CONFIG, 8))
    from_hf = convert(root / "hf", tmp_path / "ft-hf", "gptj", tp, "fp32", log=quiet)
    from_slim = convert(slim, tmp_path / "ft-slim", "gptj", tp, "fp32", workers=2, log=quiet)
    expected = files(from_hf)
    assert "config.ini" in expected
    assert len(expected) > 8 * 12
    assert files(from_slim) == expected


def test_the_reader_gives_hugging_face_tensors(weights, tmp_path):
    _root, state, wte_bias = weights
    ckpt = open_checkpoint(slim_dir(tmp_path, slim_arrays(state, wte_bias, CONFIG, 4)))
    assert isinstance(ckpt, SlimCheckpoint)
    assert set(ckpt.names()) == set(state)
    for name in ("transformer.wte.weight", "transformer.h.10.attn.q_proj.weight", "transformer.h.3.mlp.fc_out.bias",
                 "transformer.h.11.ln_1.weight", "lm_head.weight", "lm_head.bias"):  # fmt: skip
        got = ckpt.get(name)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, state[name], err_msg=name)


def test_layers_in_numeric_order_give_other_shards(weights, tmp_path):
    """The negative control: the reader's order is haiku's (layers as strings); a checkpoint
    written in numeric order has the same shapes everywhere and must not convert to the same files."""
    root, state, wte_bias = weights
    numeric = slim_dir(tmp_path, slim_arrays(state, wte_bias, CONFIG, 8, layer_order=list(range(12))))
    from_hf = convert(root / "hf", tmp_path / "ft-hf", "gptj", 1, "fp32", log=quiet)
    from_numeric = convert(numeric, tmp_path / "ft-numeric", "gptj", 1, "fp32", log=quiet)
    expected = files(from_hf)
    differ = {n for n, data in files(from_numeric).items() if expected[n] != data}
    # Read in string order, the checkpoint's layer j is taken for layer sorted(str)[j]: 0 and 1 stay.
    assert {int(n.split(".")[2]) for n in differ if n.startswith("model.layers.")} == set(range(2, 12))
    assert all(n.startswith("model.layers.") for n in differ)


def test_bfloat16_is_read_from_its_bits_and_rounded_to_float16(tmp_path):
    """Values that bfloat16 holds and float16 does not: the reader rounds as FT's converter does
    (bfloat16 -> float32 -> float16), where float32 would keep them."""
    config = {**CONFIG, "n_layer": 1}
    state, wte_bias = hf_state(config, seed=3)
    state["transformer.ln_f.weight"][:2] = [2.0**-30, 1.0 + 2.0**-7]  # bfloat16-exact; the first is 0 in float16
    slim = slim_dir(tmp_path, slim_arrays(state, wte_bias, config, 2), config=config)
    got = open_checkpoint(slim).get("transformer.ln_f.weight")
    assert got[:2].tolist() == [0.0, 1.0 + 2.0**-7]
    state["transformer.ln_f.weight"][0] = 1.0e6  # over float16's largest: FT's converter raises too
    slim = slim_dir(tmp_path, slim_arrays(state, wte_bias, config, 2), name="big", config=config)
    with pytest.raises(Exception, match="overflows float16"):
        open_checkpoint(slim).get("transformer.ln_f.weight")


@pytest.mark.parametrize(
    ("case", "message"),
    [("n_layer too small", "more arrays than a GPT-J of 11 layers has"),
     ("n_layer too large", "a GPT-J of 13 layers has"),
     ("missing part", "config n_layer does not match the checkpoint, or parts are missing"),
     ("shards disagree", "shards differ where the checkpoint keeps copies"),
     ("missing shard", "are not shard_0 .. shard_N"),
     ("no config", "a slim GPT-J needs a config.json"),
     ("wrong family", "a gptj checkpoint (its layout), not gpt")],
)  # fmt: skip
def test_a_checkpoint_that_does_not_fit_fails_clearly_and_leaves_nothing(weights, tmp_path, case, message):
    _root, state, wte_bias = weights
    arrays = slim_arrays(state, wte_bias, CONFIG, 4)
    config, family = CONFIG, "gptj"
    if case == "shards disagree":
        arrays[-1][2] = arrays[-1][2] + 0.5  # the final norm's scale, changed in one shard of the copies
    slim = slim_dir(tmp_path, arrays, config=config)
    if case.startswith("n_layer"):
        (slim / "config.json").write_text(json.dumps({**CONFIG, "n_layer": 11 if "small" in case else 13}))
    elif case == "missing part":
        for shard in slim.glob("shard_*"):
            (shard / f"{len(list(shard.iterdir())) - 1}.npz").unlink()
    elif case == "missing shard":
        shutil.rmtree(slim / "shard_2")
    elif case == "no config":
        (slim / "config.json").unlink()
    elif case == "wrong family":
        family = "gpt"
    with pytest.raises(ConversionError, match=re.escape(message)):
        convert(slim, tmp_path / "ft", family, 1, "fp32", log=quiet)
    leftovers = list((tmp_path / "ft").iterdir()) if (tmp_path / "ft").exists() else []
    assert leftovers == []
