"""Role gateway's compare entry (role canary's election): which of the settings that change what
a completion says this run would write otherwise than the gateway reads them, changing nothing."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import TINY_MODEL, role_entry_result

PUBLISHED = (
    "{'changes': gateway_settings_changes, 'file': gateway_settings_file, 'next': __gateway_settings if write else {}}"
)


def compare(tmp_path: Path, write: bool = False, **extra) -> dict:
    # the settings' file where this test may write (the role's is under /etc/ftfleet)
    return role_entry_result(tmp_path, "gateway", "compare", PUBLISHED, {"fleet_model": TINY_MODEL},
                             fleet_data_root=str(tmp_path / "srv"), __gateway_config=str(tmp_path / "tiny.json"),
                             write=write, **extra)  # fmt: skip


def test_a_setting_that_changes_answers_is_a_change_and_a_limit_on_requests_is_none(tmp_path):
    # a first deployment: no settings on the host
    first = compare(tmp_path)
    assert first["changes"] == []
    assert first["file"] == str(tmp_path / "tiny.json")
    checkpoint = tmp_path / "srv" / "checkpoints" / "tiny"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 1024}))
    # settings of an older gateway that had none of these: every one is a change
    (tmp_path / "tiny.json").write_text("{}")
    older = compare(tmp_path, write=True)
    assert older["changes"] == ["model", "context_length", "max_tokens_limit", "chat_template", "chat_bos_token",
                                "chat_eos_token", "tokenizer_dir", "checkpoint_dir", "slice_tokens"]  # fmt: skip
    now = older["next"]
    assert now["context_length"] == 1024
    (tmp_path / "tiny.json").write_text(json.dumps(now, indent=2))
    # the settings the gateway reads are this run's: no change
    assert compare(tmp_path)["changes"] == []
    # a limit on requests, a key's rate or a timeout changes no answer
    assert compare(tmp_path, gateway_max_request_bytes=4096, gateway_request_timeout_s=5)["changes"] == []
    # fewer tokens, another chat template: changes of what a completion says
    assert compare(tmp_path, gateway_max_tokens=64)["changes"] == ["max_tokens_limit"]
    assert compare(tmp_path, gateway_chat_template="h2ogpt")["changes"] == ["chat_template"]
    assert compare(tmp_path, gateway_local_tokenizer=False)["changes"] == ["tokenizer_dir"]
    # slices go on with the continuation's seed: a sampled answer is another one
    assert compare(tmp_path, gateway_slice_tokens=8)["changes"] == ["slice_tokens"]
