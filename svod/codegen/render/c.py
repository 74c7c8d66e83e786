"""C for the CPU device: the base table of ``CStyleRenderer`` as it is."""

from svod.codegen.decompositions import EXP_BY_POLYNOMIAL
from svod.codegen.render.cstyle import CStyleRenderer
from svod.dtype import DType
from svod.ir import Ops, PatternMatcher


class CRenderer(CStyleRenderer):
    """C99 with GNU builtins, for clang or gcc. Kernels take ``(bufs, vars, core_id)``."""

    reduction_pragma = "#pragma omp simd reduction({op}:{register})"

    def declare_local(self, dtype: DType, name: str, size: int) -> str:
        """A thread's private copy of a buffer (``privatize_atomics``): an array on its stack."""
        return f"{self.type_name(dtype)} {name}[{size}] __attribute__((aligned(64)));"

    def local_atomic(self, op: Ops, dtype: DType, pointer: str, value: str) -> str:
        """No other thread sees a private copy: a plain update."""
        return f"{self.deref(pointer)} = {self.combine(op, dtype, self.deref(pointer), value)};"

    def decompositor(self) -> PatternMatcher:
        """expf is one call per element: C compilers vectorise it only under -ffast-math."""
        halves = super().decompositor()
        return EXP_BY_POLYNOMIAL if halves is None else halves + EXP_BY_POLYNOMIAL
