"""Role gateway's compare entry (role canary's election): which of the settings that change what
a completion says this run would write otherwise than the gateway reads them, changing nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import run_playbook

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    fleet_model: {name: tiny, family: gpt, data_type: fp16, source: {url: "file:///x", revision: main}}
  tasks:
    - ansible.builtin.import_role:
        name: gateway
        tasks_from: compare
    - ansible.builtin.copy:
        content: "{{ {'changes': gateway_settings_changes, 'file': gateway_settings_file,
                      'next': __gateway_settings if write else {}} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""


def compare(playbook, tmp_path: Path, write: bool = False, **extra) -> dict:
    play = playbook(PLAY)
    args = {"fleet_data_root": str(tmp_path / "srv"), "ansible_python_interpreter": sys.executable,
            # the settings' file where this test may write (the role's is under /etc/ftfleet)
            "__gateway_config": str(tmp_path / "tiny.json"), "write": write, "out": str(tmp_path / "out.json"),
            **extra}  # fmt: skip
    (tmp_path / "extra.json").write_text(json.dumps(args))
    done = run_playbook(play, "-i", "localhost,", "-e", f"@{tmp_path / 'extra.json'}")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((tmp_path / "out.json").read_text())


def test_a_setting_that_changes_answers_is_a_change_and_a_limit_on_requests_is_none(playbook, tmp_path):
    # a first deployment: no settings on the host
    first = compare(playbook, tmp_path)
    assert first["changes"] == []
    assert first["file"] == str(tmp_path / "tiny.json")
    checkpoint = tmp_path / "srv" / "checkpoints" / "tiny"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 1024}))
    # settings of an older gateway that had none of these: every one is a change
    (tmp_path / "tiny.json").write_text("{}")
    older = compare(playbook, tmp_path, write=True)
    assert older["changes"] == ["model", "context_length", "max_tokens_limit", "chat_template", "chat_bos_token",
                                "chat_eos_token", "tokenizer_dir", "checkpoint_dir"]  # fmt: skip
    now = older["next"]
    assert now["context_length"] == 1024
    (tmp_path / "tiny.json").write_text(json.dumps(now, indent=2))
    # the settings the gateway reads are this run's: no change
    assert compare(playbook, tmp_path)["changes"] == []
    # a limit on requests, a key's rate or a timeout changes no answer
    assert compare(playbook, tmp_path, gateway_max_request_bytes=4096, gateway_request_timeout_s=5)["changes"] == []
    # fewer tokens, another chat template: changes of what a completion says
    assert compare(playbook, tmp_path, gateway_max_tokens=64)["changes"] == ["max_tokens_limit"]
    assert compare(playbook, tmp_path, gateway_chat_template="h2ogpt")["changes"] == ["chat_template"]
    assert compare(playbook, tmp_path, gateway_local_tokenizer=False)["changes"] == ["tokenizer_dir"]
