"""The C pair's flags follow the compiler it found."""

from svod.backends.clang import FLAGS, GCC_FLAGS, _flags


def test_gcc_takes_its_own_flags_last():
    """gcc's -O3 comes after -O2 (the last -O wins), with -fno-trapping-math for the selects to vectorise."""
    assert _flags("gcc (Debian 12.2.0-14+deb12u1) 12.2.0", avx512=False) == [*FLAGS, *GCC_FLAGS]


def test_avx512_prefers_512_bit_vectors():
    """Both compilers default to 256-bit vectors on most AVX-512 CPUs; the register tile's rows are two
    512-bit registers there."""
    wide = _flags("gcc (Debian 12.2.0-14+deb12u1) 12.2.0", avx512=True)
    assert wide == [*FLAGS, *GCC_FLAGS, "-mprefer-vector-width=512"]
    assert "-mprefer-vector-width=512" in _flags("Debian clang version 14.0.6", avx512=True)


def test_clang_before_17_groups_no_strided_accesses():
    """clang 14 vectorised a group of strided loads past a store they depend on (llvm-project#63602):
    tests/backends/test_program_order.py seed 9 gave a wrong answer with Debian 12's clang."""
    flags = _flags("Debian clang version 14.0.6", avx512=False)
    assert not set(GCC_FLAGS) & set(flags)
    assert flags[-2:] == ["-mllvm", "-enable-interleaved-mem-accesses=0"]
    assert "-enable-interleaved-mem-accesses=0" not in _flags("clang version 18.1.8", avx512=False)
