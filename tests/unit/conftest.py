"""Unit tests import the filter plugins directly, as Ansible's loader would find them."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "filter_plugins"))
