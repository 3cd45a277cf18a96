"""The gpus fact script against recorded nvidia-smi outputs, PCI data, and a host without GPUs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACT = ROOT / "roles" / "gpu_facts" / "files" / "gpus.fact"
RECORDINGS = ROOT / "tests" / "fixtures" / "gpus"


def gather(tmp_path: Path, nvidia_smi: str, sysfs: Path | None = None) -> dict:
    """Install the fact script with its settings in tmp_path and run it as setup would."""
    facts_d = tmp_path / "facts.d"
    facts_d.mkdir(exist_ok=True)
    script = facts_d / "gpus.fact"
    script.write_text(FACT.read_text())
    script.chmod(0o755)
    (facts_d / "gpus.json").write_text(json.dumps({"nvidia_smi": nvidia_smi, "sysfs": str(sysfs or tmp_path)}))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_one_gpu_from_nvidia_smi(tmp_path):
    facts = gather(tmp_path, str(RECORDINGS / "a100x1" / "nvidia-smi"))
    assert facts["source"] == "nvidia-smi"
    assert facts["count"] == 1
    assert facts["driver_version"] == "535.104.05"
    assert facts["cuda_version"] == "12.2"
    assert facts["devices"] == [{
        "index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-6c1a3b2e-5f4d-4e8a-9b1c-0d2e3f4a5b6c",
        "memory_mib": 81920, "compute_capability": "8.0", "pci_bus_id": "00000000:07:00.0", "datacenter": True,
    }]  # fmt: skip
    assert facts["compute_capabilities"] == ["8.0"]


def test_eight_gpus_of_mixed_memory(tmp_path):
    facts = gather(tmp_path, str(RECORDINGS / "mixed8" / "nvidia-smi"))
    assert facts["count"] == 8
    assert [d["index"] for d in facts["devices"]] == list(range(8))
    assert [d["memory_mib"] for d in facts["devices"]] == [81920] * 4 + [40960] * 4
    assert facts["memory_mib_min"] == 40960
    assert len({d["uuid"] for d in facts["devices"]}) == 8
    assert facts["devices"][7]["pci_bus_id"] == "00000000:BD:00.0"


def _pci_device(sysfs: Path, bus: str, vendor: str, cls: str, device: str) -> None:
    node = sysfs / "bus" / "pci" / "devices" / bus
    node.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("class", cls), ("device", device)):
        (node / name).write_text(value + "\n")


def test_pci_fallback_before_the_driver_is_installed(tmp_path):
    sysfs = tmp_path / "sys"
    _pci_device(sysfs, "0000:07:00.0", "0x10de", "0x030200", "0x20b2")  # A100 80GB, 3D controller
    _pci_device(sysfs, "0000:0f:00.0", "0x10de", "0x030200", "0x20b2")
    _pci_device(sysfs, "0000:00:1f.3", "0x10de", "0x040300", "0x10f0")  # NVIDIA HDMI audio: not a GPU
    _pci_device(sysfs, "0000:03:00.0", "0x1a03", "0x030000", "0x2000")  # ASPEED BMC VGA: not NVIDIA
    facts = gather(tmp_path, str(tmp_path / "missing-nvidia-smi"), sysfs)
    assert facts["source"] == "pci"
    assert facts["count"] == 2
    assert [d["pci_bus_id"] for d in facts["devices"]] == ["0000:07:00.0", "0000:0f:00.0"]
    assert facts["devices"][0]["pci_device_id"] == "0x20b2"
    assert facts["driver_version"] is None
    assert "missing-nvidia-smi" in facts["nvidia_smi_error"]


def test_host_without_nvidia_gpu_has_count_zero(tmp_path):
    sysfs = tmp_path / "sys"
    _pci_device(sysfs, "0000:03:00.0", "0x1a03", "0x030000", "0x2000")
    facts = gather(tmp_path, str(tmp_path / "missing-nvidia-smi"), sysfs)
    assert (facts["count"], facts["source"], facts["devices"]) == (0, "none", [])
    assert facts["memory_mib_min"] is None


@pytest.mark.parametrize("output", ["garbage line\n", "0, A100, GPU-x, notanumber, 8.0, 0:7:0.0\n"])
def test_unexpected_nvidia_smi_output_falls_back_to_pci(tmp_path, output):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '%s' '{output}'\n")
    smi.chmod(0o755)
    facts = gather(tmp_path, str(smi))
    assert (facts["source"], facts["count"]) == ("none", 0)
    assert "unexpected nvidia-smi line" in facts["nvidia_smi_error"]
