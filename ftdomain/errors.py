"""The error every domain check raises: Ansible's own filter error where Ansible loaded the module
(Ansible shows it to the user as is), a plain exception elsewhere (the native converter and decoder
on the hosts, the unit tests), where importing Ansible would patch the interpreter."""

from __future__ import annotations

import sys

if "ansible" in sys.modules:  # loaded by Ansible: its error class, shown to the user as is
    from ansible.errors import AnsibleFilterError
else:  # the native converter and decoder, or unit tests: importing Ansible would patch the interpreter

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """The filter errors' class outside Ansible."""
