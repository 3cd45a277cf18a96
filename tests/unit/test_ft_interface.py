"""ft_triton_interface: what the templates render, checked as data (the rendered files are
compared with upstream's in tests/test_triton_model_repo.py)."""

from __future__ import annotations

import pytest
from upstream_interface import UPSTREAM, expected_output

from ftdomain.errors import AnsibleFilterError
from ftdomain.ft.interface import ft_triton_interface


@pytest.mark.parametrize("family", sorted(UPSTREAM))
def test_it_declares_upstreams_inputs_and_outputs(family):
    ours = ft_triton_interface(family)
    for model, theirs in UPSTREAM[family].items():
        inputs = {t["name"]: (t["data_type"], t["dims"], t["optional"], t["reshape"]) for t in ours[model]["inputs"]}
        for name, *spec in theirs["inputs"]:
            assert inputs.get(name) == tuple(spec), (model, name)
        outputs = {t["name"]: (t["data_type"], t["dims"]) for t in ours[model]["outputs"]}
        for name, *spec in theirs["outputs"]:
            assert outputs.get(name) == expected_output(family, name, spec), (model, name)
        assert set(theirs["parameters"]) <= set(ours[model]["parameters"]), model


@pytest.mark.parametrize("family", sorted(UPSTREAM))
def test_the_ensemble_feeds_every_model_input_it_declares(family):
    """Every optional ensemble input goes to the fastertransformer model under the same name (the
    template maps them by name): none may be missing there."""
    ours = ft_triton_interface(family)
    ft = {t["name"] for t in ours["fastertransformer"]["inputs"]}
    sampling = [t["name"] for t in ours["ensemble"]["inputs"] if not t["name"].startswith("INPUT_")]
    assert sampling
    assert set(sampling) <= ft


def test_an_unknown_family_is_named():
    with pytest.raises(AnsibleFilterError, match="ft_triton_interface: unknown model family 'opt'"):
        ft_triton_interface("opt")
