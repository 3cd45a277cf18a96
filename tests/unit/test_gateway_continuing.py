"""The continuation's pure parts (ftgateway/continuing.py): which failures another host may go on
from, the sampling inputs of a continuation, and the peers setting as the gateway checks it. The
whole (two tritonservers, a kill mid-stream) is tests/test_continuation.py."""

from __future__ import annotations

import pytest
from tritonclient.utils import InferenceServerException

from ftgateway.config import ConfigError, Peer, Settings, peers_of
from ftgateway.continuing import broken
from ftgateway.errors import PeerFailed
from ftgateway.sampling import UINT64_MAX, Sampling, continued


@pytest.mark.parametrize(
    ("status", "message", "goes_on"),
    [
        ("StatusCode.UNAVAILABLE", "Socket closed", True),
        ("StatusCode.UNAVAILABLE", "failed to connect to all addresses", True),
        ("StatusCode.NOT_FOUND", "Request for unknown model", True),  # restarting, not loaded yet
        ("StatusCode.CANCELLED", "Received RST_STREAM", True),
        ("StatusCode.INTERNAL", "Stream removed", True),
        ("StatusCode.INTERNAL", "'fastertransformer' has no available versions", True),  # unloading
        ("StatusCode.INTERNAL", "input_ids: expected UINT32", False),  # the request itself
        ("StatusCode.INVALID_ARGUMENT", "unexpected shape", False),
        ("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded", False),  # it ran out of time: no retry
    ],
)
def test_a_server_gone_is_continued_a_request_refused_is_not(status, message, goes_on):
    assert broken(InferenceServerException(message, status=status)) is goes_on


def test_os_errors_and_peers_that_went_away():
    assert broken(ConnectionResetError("reset"))
    assert not broken(TimeoutError("timed out"))
    assert broken(PeerFailed("went away mid-way", broken=True))
    assert not broken(PeerFailed("no other host", broken=False))
    assert not broken(ValueError("x"))


def test_a_continuation_advances_the_seed_and_shortens_min_length():
    params = Sampling(runtime_top_k=40, runtime_top_p=0.9, temperature=0.7, random_seed=7, min_length=11)
    after = continued(params, 4)
    assert (after.random_seed, after.min_length) == (11, 7)  # the 11th token of the request is its 7th
    assert (after.runtime_top_k, after.runtime_top_p, after.temperature) == (40, 0.9, 0.7)
    assert continued(params, 10).min_length == 0  # 11 - 10 = 1: no token is held back any more
    assert continued(Sampling(1, 0.0, 1.0, UINT64_MAX), 2).random_seed == 1  # FT's uint64 wraps


def test_the_peers_setting_is_checked():
    expected = (Peer("https://10.0.0.2:8080", "gpu-2"),)
    assert peers_of([{"url": "https://10.0.0.2:8080/", "tls_name": "gpu-2"}]) == expected
    for bad, words in (("http://x", "must be a list"), ([{"url": "10.0.0.2:8080"}], "url must be http"),
                       ([{"url": "http://x", "port": 1}], "must be .url, tls_name.")):  # fmt: skip
        with pytest.raises(ValueError, match=words):
            peers_of(bad)
    with pytest.raises(ConfigError, match="'continuations' must be a whole number >= 0"):
        Settings.from_dict({"model": "m", "allow_anonymous": True, "continuations": -1})
    with pytest.raises(ConfigError, match="url must be http"):
        Settings.from_dict({"model": "m", "allow_anonymous": True, "peers": [{"url": "x"}]})
    settings = Settings.from_dict({"model": "m", "allow_anonymous": True, "peers": [{"url": "http://h:1"}]})
    assert settings.peers == (Peer("http://h:1"),)
    assert settings.continuations == 2
