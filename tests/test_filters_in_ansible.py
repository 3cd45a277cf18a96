"""The filters inside Ansible: loaded from filter_plugins/ through ansible.cfg, used in a play,
and a bad input failing the play with the filter's message in front of the user."""

from __future__ import annotations

import json

from conftest import run_playbook

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    hf_config: {hf_config}
    params: "{{{{ hf_config | ft_model_params('gptj') }}}}"
  tasks:
    - name: Check the parallelism for this host
      ansible.builtin.set_fact:
        checked: "{{{{ params | ft_check_parallelism(tp | int, 1, tp | int) }}}}"
    - name: Show what the filters derive
      ansible.builtin.debug:
        msg:
          gemm: "{{{{ params | ft_gemm_argv(8, 1, 32, 'fp16', tp | int) | join(' ') }}}}"
          shard_dir: "{{{{ '/srv/models/kogpt' | ft_shard_dir(tp) }}}}"
          files: "{{{{ 'gptj' | ft_expected_files(params, tp | int, 'fp32') | length }}}}"
          flavour: "{{{{ ('gptj' | ft_family).flavour }}}}"
          sm: "{{{{ ['8.0', '8.0'] | cuda_sm }}}}"
"""

GPTJ = {"n_embd": 4096, "n_head": 16, "n_layer": 28, "rotary_dim": 64, "vocab_size": 50400,
        "bos_token_id": 50256, "eos_token_id": 50256}  # fmt: skip


def test_filters_work_inside_a_play(playbook):
    play = playbook(PLAY.format(hf_config=json.dumps(GPTJ)))
    result = run_playbook(play, "-i", "localhost,", "-e", "tp=1")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "gemm: gpt_gemm 8 1 32 16 256 16384 50400 1 1" in out
    assert "shard_dir: /srv/models/kogpt/fastertransformer/1/1-gpu" in out
    assert "files: '229'" in out or "files: 229" in out
    assert "flavour: nvidia" in out
    assert "sm: '80'" in out


def test_a_bad_tp_fails_the_play_with_the_filter_message(playbook):
    play = playbook(PLAY.format(hf_config=json.dumps(GPTJ)))
    result = run_playbook(play, "-i", "localhost,", "-e", "tp=3")
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "ft_check_parallelism: tensor_para_size 3 does not divide head_num 16 (valid: 1, 2, 4, 8, 16)" in out
    assert "Show what the filters derive" not in out
