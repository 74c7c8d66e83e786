"""C for the CPU device: the base table of ``CStyleRenderer`` as it is."""

from svod.codegen.render.cstyle import CStyleRenderer


class CRenderer(CStyleRenderer):
    """C99 with GNU builtins, for clang or gcc. Kernels take ``(bufs, vars, core_id)``."""

    upcast = True
    reduction_pragma = "#pragma omp simd reduction({op}:{register})"
    splits_reductions = True
