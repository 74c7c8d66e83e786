"""C for the CPU device: the base table of ``CStyleRenderer`` as it is."""

from svod.codegen.decompositions import CPU_MATH
from svod.codegen.render.base import reassociable_accumulators
from svod.codegen.render.cstyle import CStyleRenderer
from svod.dtype import DType, dtypes
from svod.ir import Ops, PatternMatcher, UOp


class CRenderer(CStyleRenderer):
    """C99 with GNU builtins, for clang or gcc. Kernels take ``(bufs, vars, core_id)``."""

    reduction_pragma = "#pragma omp simd reduction({op}:{register})"
    float_sum = "svod_sum"
    """The reduction a float sum's pragma names: OpenMP's ``+`` starts each lane's partial sum from +0.0, which
    turns a sum of -0.0s into +0.0 (``-0.0 + +0.0``); this one starts them from -0.0, svod's identity."""

    def reduction_operator(self, update: UOp) -> str | None:
        operator = super().reduction_operator(update)
        return self.float_sum if operator == "+" and update.src[1].dtype in (dtypes.float32, dtypes.float64) \
            else operator

    def vectorised_sum_of_products(self, dtype: DType, args: list[str]) -> str:
        """gcc vectorises a sum of ``fmaf`` calls, but clang's vectoriser takes only ``acc + a*b`` for a sum of
        products, contracted (``fp contract(fast)``), which fuses on every CPU with FMA instructions."""
        return f"svod_sum_fma{self.math_suffix[dtype.name]}({', '.join(args)})"

    def helpers(self, linear: tuple[UOp, ...]) -> str:
        sums = any(self.reduction_operator(u) == self.float_sum
                   for updates in reassociable_accumulators(linear).values() for u in updates)
        declared = (f"#pragma omp declare reduction({self.float_sum} : float, double : omp_out += omp_in) "
                    "initializer(omp_priv = -0.0)\n") if sums else ""
        if not any(u.op is Ops.MULACC for u in linear):
            return super().helpers(linear) + declared
        contracted = '__extension__({ _Pragma("clang fp contract(fast)") (acc) + (a) * (b); })'
        return (super().helpers(linear) + declared + "#if defined(__clang__)\n"
                f"#define svod_sum_fmaf(a, b, acc) {contracted}\n#define svod_sum_fma(a, b, acc) {contracted}\n"
                "#else\n#define svod_sum_fmaf(a, b, acc) fmaf(a, b, acc)\n"
                "#define svod_sum_fma(a, b, acc) fma(a, b, acc)\n#endif\n")

    def extremum_helper(self, op: Ops, t: str, name: str) -> str:
        """gcc 12 vectorises neither spelling (at -O2 or -O3), and runs the one of branches faster (a row maximum of 32
        partials), where clang vectorises the selects."""
        beats, keeps = (">", "!") if op is Ops.MAX else ("<", "")
        branches = (f"{self.helper_qualifier} {t} {name}({t} a, {t} b) {{ return (a {beats} b || b != b || "
                    f"(a == b && {keeps}{self.signbit}(a))) ? a : b; }}\n")
        return f"#if defined(__clang__)\n{super().extremum_helper(op, t, name)}#else\n{branches}#endif\n"

    def declare_local(self, dtype: DType, name: str, size: int) -> str:
        """A thread's private copy of a buffer (``privatize_atomics``): an array on its stack."""
        return f"{self.type_name(dtype)} {name}[{size}] __attribute__((aligned(64)));"

    def local_atomic(self, op: Ops, dtype: DType, pointer: str, value: str) -> str:
        """No other thread sees a private copy: a plain update."""
        return f"{self.deref(pointer)} = {self.combine(op, dtype, self.deref(pointer), value)};"

    def decompositor(self) -> PatternMatcher:
        """expf, logf and erff are one call per element: C compilers vectorise them only under -ffast-math."""
        halves = super().decompositor()
        return CPU_MATH if halves is None else halves + CPU_MATH
