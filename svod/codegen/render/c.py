"""C for the CPU device: the base table of ``CStyleRenderer`` as it is."""

from svod.codegen.decompositions import EXP_BY_POLYNOMIAL
from svod.codegen.render.cstyle import CStyleRenderer
from svod.ir import PatternMatcher


class CRenderer(CStyleRenderer):
    """C99 with GNU builtins, for clang or gcc. Kernels take ``(bufs, vars, core_id)``."""

    reduction_pragma = "#pragma omp simd reduction({op}:{register})"
    splits_reductions = True

    def decompositor(self) -> PatternMatcher:
        """expf is one call per element: C compilers vectorise it only under -ffast-math."""
        halves = super().decompositor()
        return EXP_BY_POLYNOMIAL if halves is None else halves + EXP_BY_POLYNOMIAL
