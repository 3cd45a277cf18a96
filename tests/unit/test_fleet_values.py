"""One reading of a boolean for every filter (ftdomain/values.py), as Ansible's own
`bool` filter reads one: the canary, the registry's plans, the monitoring and the placement
checks agreed on none of "on", numbers and lists before."""

from __future__ import annotations

import pytest

from ftdomain.values import truthy


@pytest.mark.parametrize("value", [True, 1, 2, "1", "true", "True", " yes ", "on", "ON", "y", "t", ["a"], {"k": 1}])
def test_true_values(value):
    assert truthy(value) is True


@pytest.mark.parametrize("value", [False, 0, "", "0", "false", "no", "off", "n", "nope", [], {}])
def test_false_values(value):
    assert truthy(value) is False


def test_none_is_the_default():
    assert truthy(None) is False
    assert truthy(None, True) is True
