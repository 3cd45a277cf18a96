"""roles/fleet_shared, entry point packages: a host that has every package asks no mirror (the
install task is skipped); one that lacks any refreshes its lists and installs. On this machine,
in check mode: git is installed (make's tools), cowsay is not."""

from __future__ import annotations

import re

from conftest import run_playbook

PLAY = """
- name: Packages through fleet_shared
  hosts: localhost
  gather_facts: true
  tasks:
    - name: All installed
      ansible.builtin.import_role: {name: fleet_shared, tasks_from: packages}
      vars: {fleet_shared_packages: [git]}

    - name: One missing
      ansible.builtin.import_role: {name: fleet_shared, tasks_from: packages}
      vars: {fleet_shared_packages: [git, cowsay], fleet_shared_packages_recommends: false}
"""


def test_installed_packages_skip_the_install_and_a_missing_one_installs(tmp_path):
    (tmp_path / "play.yml").write_text(PLAY)
    done = run_playbook("-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=/usr/bin/python3",
                        "--check", tmp_path / "play.yml")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = {}  # task -> its result on localhost, each task's output read up to the next one's
    for chunk in done.stdout.split("TASK [fleet_shared : packages | ")[1:]:
        results[chunk.split("]", 1)[0]] = re.search(r"^(ok|changed|skipping|failed):", chunk, re.MULTILINE)[1]
    assert results == {
        "Find which are installed: git": "ok",
        "Install git": "skipping",
        "Find which are installed: git, cowsay": "ok",
        "Install git, cowsay": "changed",
    }, done.stdout
