"""Ansible's filters of ftdomain.ft.cuda: their names and documentation (ansible-doc reads them here),
the code in the package."""

from __future__ import annotations

DOCUMENTATION = r"""
name: cuda_sm
short_description: CUDA SM values for FT builds and the driver a Triton container needs
description:
  - cuda_sm turns a compute capability (C(8.0), C("9.0"), or a list of them) into the SM value
    FT's build takes (C("80"); a list gives the distinct values joined by commas, C("80,86")).
    FT builds kernels for 60, 61, 70, 75, 80, 86, 89 and 90 only.
  - triton_min_driver(container_version) returns the CUDA version of an NGC Triton container,
    its minimum driver branch, and the data-center compatibility drivers (from NVIDIA's
    Triton release notes).
  - container_sms(container_version) returns the CUDA of an NGC container release and the SM
    values a build inside it can target (CUDA 11.8, the 22.10 containers, added SM 89 and 90).
  - triton_driver_ok(driver_version, container_version, datacenter) says whether a host's
    driver runs that container, with the reason. A bare branch (C("535")) stands for the newest
    release of that branch, i.e. what a driver install of that branch gets.
options:
  _input:
    description: Compute capability (cuda_sm), container version (triton_min_driver) or driver
      version (triton_driver_ok).
    required: true
"""

EXAMPLES = r"""
- name: SM build argument for every GPU of the host
  ansible.builtin.debug:
    msg: "{{ ansible_local.gpus.devices | map(attribute='compute_capability') | cuda_sm }}"

- name: Minimum driver for the 22.04 container
  ansible.builtin.debug:
    msg: "{{ '22.04' | triton_min_driver }}"
"""

RETURN = r"""
_value:
  description: >-
    cuda_sm - a string; triton_min_driver - {container, cuda, min_driver, datacenter_drivers};
    container_sms - {container, cuda, sms};
    triton_driver_ok - {ok, reason}.
  type: raw
  sample: {container: "22.04", cuda: "11.6", min_driver: 510,
           datacenter_drivers: ["418.40", "440.33", "450.51", "460.27", "470.57"]}
"""

from typing import Any

from ftdomain.ft.cuda import container_sms, cuda_sm, triton_driver_ok, triton_min_driver


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "cuda_sm": cuda_sm,
            "container_sms": container_sms,
            "triton_min_driver": triton_min_driver,
            "triton_driver_ok": triton_driver_ok,
        }
