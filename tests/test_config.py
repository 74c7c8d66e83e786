import dataclasses
from pathlib import Path

import pytest

import svod
from svod import KernelBuilder, dtypes
from svod.backends import DeviceRegistry
from svod.config import Settings
from svod.errors import SvodError
from svod.runtime import KernelCache


def test_defaults():
    config = Settings.from_env({"HOME": "/home/someone"})
    assert config.disk_cache and config.cpu_compiler == "llvm" and not config.debug and config.threads >= 1
    assert config.cuda_arch == "sm_90"
    assert Settings.from_env({"XDG_CACHE_HOME": "/x"}).cache_dir == Path("/x/svod")


def test_every_variable_is_read():
    config = Settings.from_env({"SVOD_CACHE_DIR": "/c", "SVOD_CACHE": "0", "SVOD_THREADS": "3",
                                "SVOD_CPU_COMPILER": "Clang", "SVOD_DEBUG": "1", "SVOD_CUDA_ARCH": "sm_80"})
    assert (config.cache_dir, config.disk_cache, config.threads, config.cpu_compiler, config.debug,
            config.cuda_arch) == (Path("/c"), False, 3, "clang", True, "sm_80")


def test_debug_passes_is_its_own_setting():
    assert Settings.from_env({"SVOD_DEBUG": "passes"}).debug_passes
    assert not Settings.from_env({"SVOD_DEBUG": "1"}).debug_passes
    assert not Settings.from_env({}).debug_passes


@pytest.mark.parametrize(("name", "value"), [("SVOD_THREADS", "0"), ("SVOD_THREADS", "many"),
                                             ("SVOD_CPU_COMPILER", "icc")])
def test_bad_values_are_errors(name, value):
    with pytest.raises(SvodError, match=name):
        Settings.from_env({name: value})


def test_cpu_compiler_setting_picks_the_primary_pair():
    registry = DeviceRegistry(Settings.from_env({"SVOD_CPU_COMPILER": "clang"}))
    assert registry.compiler_names("CPU") == ["clang", "llvm"]
    assert registry.get("CPU").compiler.cache_key.startswith("c-")


def test_debug_prints_source_and_timing(capsys, tmp_path):
    config = dataclasses.replace(Settings.from_env({}), debug=True, cache_dir=tmp_path)
    k = KernelBuilder("noisy")
    out = k.buffer(dtypes.int32, 3)
    i = k.range(3)
    k.store(out[i], i.cast(dtypes.int32))
    KernelCache(config).get(k.build(), svod.get_device("CPU"))
    err = capsys.readouterr().err
    assert "noisy" in err and "ms" in err and "define void" in err
