"""Load the Jinja filter and test plugins once, in the controller, before its workers fork.

Ansible runs each task on each host in a worker process forked from the controller. The first
time a worker templates an expression that names a filter or a test (`x | length`, `x is defined`),
Ansible imports every filter and test plugin file it can see (ansible-core's and this project's
filter_plugins/, 17 files) to build its table of names; the controller itself never does, so no
worker inherits that table and every worker builds it again: on this project's 2-core machines,
about 10 ms of CPU per task and host, which is most of what a task such as
`assert: that: x | length == 0` costs beyond a plain `set_fact` (docs/performance.md, "A thousand
hosts"). This callback builds the table in the controller at the start of each play (a second
call finds it built and returns at once), so that every worker forked after it inherits it.
Ansible clears the table itself when a directory of plugins is added later (a role's own
filter_plugins/, say), and the workers then build it as before: never a stale table.

Enabled by ansible.cfg (callbacks_enabled), ftfleet, scripts/scale-bench and Molecule's
configuration, which also point Ansible at this folder (ansible-runner and Molecule replace
ansible.cfg's callback_plugins path with their own).
"""

from __future__ import annotations

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader

DOCUMENTATION = r"""
name: fleet_warm
type: aggregate
short_description: Load the filter and test plugins in the controller, before its workers fork
description:
  - At the start of each play, loads every Jinja filter and test plugin the run can see, in the
    controller, so that the workers it forks for each task and host inherit them instead of each
    importing every plugin file again.
requirements:
  - enabled in callbacks_enabled (ansible.cfg does), and this folder in callback_plugins
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fleet_warm"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_play_start(self, play: object) -> None:
        for loader in (filter_loader, test_loader):
            for _plugin in loader.all():  # builds the loader's table of names, once
                pass
