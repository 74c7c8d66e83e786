"""What the CPU backend reads of its host."""

from __future__ import annotations

import pytest

import svod
from svod.backends import cpu_host
from svod.device.caps import ASSUMED_L2_BYTES


def _caches(root, *caches):
    """A directory laid out as Linux's ``cpu0/cache``: one ``indexN`` per (level, type, size)."""
    for number, (level, kind, size) in enumerate(caches):
        entry = root / f"index{number}"
        entry.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (entry / name).write_text(f"{text}\n")
    return root


@pytest.mark.parametrize(("caches", "expected"), [
    ((("1", "Data", "32K"), ("1", "Instruction", "32K"), ("2", "Unified", "512K"), ("3", "Unified", "32768K")),
     512 << 10),
    ((("1", "Data", "48K"), ("2", "Unified", "2M")), 2 << 20),
    ((("1", "Data", "48K"), ("2", "Unified", "0K")), ASSUMED_L2_BYTES),  # a virtual machine's blank
    ((("1", "Data", "48K"), ("3", "Unified", "8192K")), ASSUMED_L2_BYTES),  # no L2 described
    ((), ASSUMED_L2_BYTES),
])
def test_the_l2_size_is_read_from_linux_or_assumed(tmp_path, monkeypatch, caches, expected):
    monkeypatch.setattr(cpu_host, "CACHES", _caches(tmp_path, *caches))
    cpu_host.host_l2_bytes.cache_clear()
    try:
        assert cpu_host.host_l2_bytes() == expected
    finally:
        cpu_host.host_l2_bytes.cache_clear()


def test_the_cpu_device_sizes_blocks_by_this_hosts_l2():
    caps = svod.get_device("CPU").renderer.caps
    assert caps.l2_bytes == cpu_host.host_l2_bytes() > 0
    assert f"-l2{caps.l2_bytes}" in svod.get_device("CPU").renderer.cache_key
