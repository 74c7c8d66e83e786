"""CUDA: every corpus kernel renders and compiles to PTX with nvrtc, and ptxas assembles that PTX for each
architecture CI checks (no GPU needed for either); running needs one."""

from __future__ import annotations

import functools
import importlib
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import svod
from svod import AxisKind, KernelBuilder, UOp, dtypes
from svod.backends import cuda
from svod.backends.cuda import NVRTCCompiler, assemble_ptx, find_ptxas
from svod.codegen.render.cuda import CUDARenderer
from svod.device import entry_symbol
from svod.errors import CompileError, DeviceError, RaceError
from tests.helpers import open_device

nvrtc_missing = None
try:
    NVRTCCompiler()
except DeviceError as err:
    nvrtc_missing = err.detail
requires_nvrtc = pytest.mark.skipif(nvrtc_missing is not None, reason=f"nvrtc unavailable: {nvrtc_missing}")


def _corpus():
    k = KernelBuilder("saxpy")
    n = k.var("n", 1, 1 << 20)
    out, x = k.buffer(dtypes.float32, n), k.buffer(dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * 2.0 + 1.0)
    yield k.build()
    k = KernelBuilder("matmul")
    c, a, b = (k.buffer(dtypes.float32, 17 * 19) for _ in range(3))
    i, j = k.range(17), k.range(19)
    r = k.range(13, AxisKind.REDUCE)
    k.store(c[i * 19 + j], (a[i * 13 + r] * b[r * 19 + j]).reduce(r, op=svod.Ops.MAX))
    yield k.build()
    k = KernelBuilder("ints")
    q, x64, y8 = k.buffer(dtypes.int32, 64), k.buffer(dtypes.int64, 64), k.buffer(dtypes.uint8, 64)
    f = k.buffer(dtypes.float64, 64)
    i = k.range(64)
    k.store(q[i], (x64[i] // (x64[i] % 7 + 1)).cast(dtypes.int32) * 3 - 1)
    k.store(y8[i], y8[i] + 200)
    k.store(f[i], (f[i] < 0.0).where(-f[i], f[i].sqrt()).maximum(f[i].bitcast(dtypes.int64).cast(dtypes.float64)))
    yield k.build()


@requires_nvrtc
@pytest.mark.parametrize("ast", list(_corpus()), ids=lambda a: a.arg)
def test_corpus_compiles_to_ptx(ast):
    renderer, compiler = svod.compiler_pair("CUDA")
    spec = renderer.render(ast)
    compiled = compiler.compile(spec)
    ptx = compiled.bytes.decode()
    assert f".entry {entry_symbol(ast.arg, spec.ast)}(" in ptx
    assert ".target sm_90" in ptx
    assert spec.local_size is not None
    assert "threadIdx" in spec.src


@requires_nvrtc
def test_the_architecture_is_settable():
    renderer = CUDARenderer()
    compiled = NVRTCCompiler("sm_80").compile(renderer.render(next(_corpus())))
    assert ".target sm_80" in compiled.bytes.decode()
    with pytest.raises(DeviceError, match="sm_90"):
        NVRTCCompiler("hopper")


@requires_nvrtc
def test_nvrtc_errors_carry_the_log():
    renderer, compiler = svod.compiler_pair("CUDA")
    spec = renderer.render(next(_corpus()))
    spec.src = spec.src.replace("const long long n", "const long long n = ;")
    with pytest.raises(CompileError, match="nvrtc failed") as info:
        compiler.compile(spec)
    assert "error" in info.value.log and info.value.source == spec.src


def _half() -> UOp:
    k = KernelBuilder("half")
    out, x = k.buffer(dtypes.float16, 4), k.buffer(dtypes.float64, 4)
    i = k.range(4)
    k.store(out[i], out[i] * 3.0 + x[i].cast(dtypes.float16))
    return k.build()


@requires_nvrtc
def test_float16_compiles_as_bits_computed_in_float32():
    """The nvrtc wheel ships no cuda_fp16.h: halves are stored as their bits and computed in float32."""
    spec = CUDARenderer().render(_half())
    assert "svod_f32_to_f16" in spec.src and "svod_f64_to_f16" in spec.src and "_Float16" not in spec.src
    assert b".entry" in NVRTCCompiler().compile(spec).bytes


def test_device_says_why_it_is_missing():
    if "CUDA:0" in svod.available_devices():
        pytest.skip("a CUDA GPU is present; the missing-driver path cannot be seen here")
    with pytest.raises(DeviceError) as info:
        svod.get_device("CUDA")
    assert "driver" in info.value.detail or "not installed" in info.value.detail
    assert "CUDA:0" not in svod.available_devices()


def test_saxpy_runs_on_the_gpu():
    device = open_device("CUDA:0")  # without a GPU and its driver, a skip that says which is missing
    ast = next(_corpus())
    x = np.arange(1000, dtype=np.float32)
    out = np.zeros(1000, np.float32)
    svod.run(ast, [out, x], device=device, n=999)
    np.testing.assert_array_equal(out[:999], x[:999] * 2 + 1)


def _new_constructs():
    from tests.kernels import nested_corpus
    yield from (ast for ast, _ in nested_corpus())
    for dtype in (dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float32, dtypes.float64):
        for update in ("atomic_add", "atomic_max", "atomic_min"):
            k = KernelBuilder(f"{update}_{dtype.name}")
            out, x, idx = k.buffer(dtype, 16), k.buffer(dtype, 100), k.buffer(dtypes.int32, 100)
            i = k.range(100)
            getattr(k, update)(out[idx[i]], x[i])  # a data-dependent index: bounds-checked at run time
            yield k.build()
    k = KernelBuilder("guarded_and_converted")
    out, x = k.buffer(dtypes.float32, 10), k.buffer(dtypes.float32, 10)
    i = k.range(10)
    padded = (i + 1 < 10).where(x[i + 1], 0.0)
    k.store(out[i], padded.maximum(x[i]).minimum(2.0) + x[i].cast(dtypes.int8).cast(dtypes.float32))
    yield k.build()


@requires_nvrtc
@pytest.mark.parametrize("ast", list(_new_constructs()), ids=lambda a: a.arg)
def test_nested_reductions_atomics_gates_and_checks_compile_to_ptx(ast):
    renderer, compiler = svod.compiler_pair("CUDA")
    spec = renderer.render(ast)
    ptx = compiler.compile(spec).bytes.decode()
    assert f".entry {entry_symbol(ast.arg, spec.ast)}(" in ptx
    if ast.arg.startswith("atomic"):
        assert "atom." in ptx


def _vocabulary(dtype=dtypes.float32) -> UOp:
    k = KernelBuilder(f"vocabulary_{dtype.name}")
    out, x, bits = k.buffer(dtype, 8), k.buffer(dtype, 8), k.buffer(dtypes.int32, 8)
    i = k.range(8)
    v = x[i]
    total = v.exp() + v.log() + v.cos() + v.tan() + v.tanh() + v.erf() + v.floor() + v.ceil() + v.trunc()
    k.store(out[i], total + v.round() + v ** 1.5 + v.sigmoid() + v.rsqrt() + v.clamp(0.0, 1.0) + v.fmod(0.7))
    k.store(bits[i], (bits[i] << 3) ^ (bits[i] >> 2) ^ ~bits[i])
    return k.build()


@requires_nvrtc
def test_math_vocabulary_and_shifts_compile_to_ptx():
    spec = CUDARenderer().render(_vocabulary())
    assert "erff(" in spec.src and "powf(" in spec.src and "rintf(" in spec.src and "fmodf(" in spec.src
    assert b".entry" in NVRTCCompiler().compile(spec).bytes


@requires_nvrtc
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_a_sum_of_products_compiles_to_fused_multiply_adds(dtype):
    """nvrtc runs with ``--fmad=false``: the only fused multiply-adds are those the kernel means."""
    k = KernelBuilder(f"matmul_{dtype.name}")
    c, a, b = (k.buffer(dtype, 17 * 19) for _ in range(3))
    i, j, r = k.range(17), k.range(19), k.range(13, AxisKind.REDUCE)
    k.store(c[i * 19 + j], (a[i * 13 + r] * b[r * 19 + j]).reduce(r))
    renderer, compiler = svod.compiler_pair("CUDA")
    ptx = compiler.compile(renderer.render(k.build())).bytes.decode()
    assert f"fma.rn.f{dtype.bits}" in ptx


# ---- PTX assembled by ptxas ----------------------------------------------------------------------------------

requires_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas here (extra cuda: the nvidia-cuda-nvcc "
                                                                 "wheel ships it; or a CUDA toolkit on PATH)")
ARCHS = ["sm_90", "sm_80"]
"""What CI assembles for: Hopper (H100, H200) and Ampere (A100). nvrtc compiles for one architecture, so each
gets PTX of its own."""


def _every_dtype() -> UOp:
    """Each dtype loaded and converted to every other: each buffer gets the sum of all the others, the bool
    one a comparison."""
    every = [dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
             dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64]
    k = KernelBuilder("every_dtype")
    buffers = [k.buffer(dtype, 16) for dtype in every]
    i = k.range(16)
    k.store(buffers[0][i], buffers[3][i].ne(0))
    for out, dtype in zip(buffers[1:], every[1:], strict=True):
        k.store(out[i], functools.reduce(lambda a, b: a + b, (b[i].cast(dtype) for b in buffers if b is not out)))
    return k.build()


def _contraction(dtype, op) -> UOp:
    k = KernelBuilder(f"contraction_{op.name.lower()}_{dtype.name}")
    out, a, b = k.buffer(dtype, (33, 65)), k.buffer(dtype, (33, 70)), k.buffer(dtype, (65, 70))
    i, j, r = k.range(33), k.range(65), k.range(70, AxisKind.REDUCE)
    k.store(out[i, j], (a[i, r] * b[j, r]).reduce(r, op=op))
    return k.build()


_WORK_GROUPS = "tests.backends.test_work_groups"


def _elsewhere(module: str, builder: str, *args: object, **kwargs: object) -> Callable[[], UOp]:
    """A kernel another test module builds, imported when the kernel is built: those modules import this one."""
    return lambda: getattr(importlib.import_module(module), builder)(*args, **kwargs)


@functools.cache
def _benchmark_suite() -> dict[str, UOp]:
    """The kernels ``svod bench --suite kernels --device CUDA:0`` times (its quick sizes, as constants), each
    written in Python."""
    from benchmarks.suite import suite
    return {f"{w.name}.{n}": step.ast for w in suite(quick=True, static_shapes=True) for n, step in enumerate(w.steps)}


def _ptx_corpus() -> dict[str, Callable[[], UOp]]:
    """Every kernel the tests above compile, the kernel collection (each also written in Python, and the
    benchmark suite's sizes), the work-group kernels (shared memory, barriers, staged tiles), loops that exit,
    every dtype, and contractions (upcast reductions) of each kind and float type."""
    from svod.workloads import PYTHON_KERNELS, layernorm, matmul, softmax, written_in_python
    from tests.kernels import SMALL_WORKLOADS

    corpus: dict[str, Callable[[], UOp]] = {}
    for number, ast in enumerate([*_corpus(), *_new_constructs()]):
        corpus[f"{ast.arg}.{number}"] = lambda ast=ast: ast
    for name, make in SMALL_WORKLOADS.items():
        workload = make()
        for number in range(len(workload.steps)):
            corpus[f"{name}.{number}"] = lambda make=make, n=number: make().steps[n].ast
            if workload.family in PYTHON_KERNELS:
                corpus[f"{name}_py.{number}"] = lambda make=make, n=number: written_in_python(make()).steps[n].ast
    for name in _benchmark_suite():
        corpus[f"suite_{name}"] = lambda name=name: _benchmark_suite()[name]
    corpus |= {
        "half": _half, "vocabulary_float32": _vocabulary, "vocabulary_float64": lambda: _vocabulary(dtypes.float64),
        "every_dtype": _every_dtype, "collatz": _elsewhere("tests.codegen.test_exits", "collatz"),
        "collatz_bounded": _elsewhere("tests.codegen.test_exits", "collatz", bounded=True),
        "softmax_shared": lambda: softmax(64, 1024).steps[0].ast,
        "layernorm_shared": lambda: layernorm(8, 300).steps[0].ast,
        "matmul_128": lambda: matmul(128).steps[0].ast,
        "staged_matmul": _elsewhere(_WORK_GROUPS, "_staged_matmul", 100, 70, 33),
        "staged_matmul_int32": _elsewhere(_WORK_GROUPS, "_staged_matmul", 19, 21, 37, dtypes.int32),
    }
    ops = svod.Ops
    for dtype, reductions in ((dtypes.float16, [ops.ADD]), (dtypes.float32, [ops.ADD, ops.MAX, ops.MIN, ops.MUL]),
                              (dtypes.float64, [ops.ADD, ops.MAX])):
        for op in reductions:
            corpus[f"contraction_{op.name.lower()}_{dtype.name}"] = lambda d=dtype, o=op: _contraction(d, o)
    return corpus


PTX_CORPUS = _ptx_corpus()


def _same_source_as_its_twin(name: str, src: str, entry: str) -> bool:
    """Whether the kernel ``name`` is a collection kernel written in Python (``<family>_py.<n>``) whose CUDA
    source is its builder twin's, the entry's name aside: nvrtc and ptxas would be given the same program."""
    twin = name.replace("_py.", ".", 1)
    if twin == name or twin not in PTX_CORPUS:
        return False
    twin_spec = CUDARenderer().render(PTX_CORPUS[twin]())
    return src.replace(entry, twin_spec.name) == twin_spec.src


@requires_nvrtc
@requires_ptxas
@pytest.mark.parametrize("name", sorted(PTX_CORPUS))
def test_ptxas_assembles_the_ptx_of_every_kernel(name):
    """What nvrtc makes of each kernel for each architecture, assembled by ptxas for it: a kernel a GPU's
    driver would refuse to load fails here, on a machine without one. The kernel is rendered once for both;
    one written in Python that renders to its twin's source is that program, which the twin's case assembles."""
    spec = CUDARenderer().render(PTX_CORPUS[name]())
    if _same_source_as_its_twin(name, spec.src, spec.name):
        return
    for arch in ARCHS:
        ptx = NVRTCCompiler(arch).compile(spec).bytes
        assert f".target {arch}".encode() in ptx
        assert assemble_ptx(ptx, arch, kernel=spec.name)[:4] == b"\x7fELF"  # a cubin


@requires_nvrtc
@requires_ptxas
def test_ptxas_assembles_random_python_kernels():
    """Random Python kernels (``tests.frontend.python_kernels``, with and without ``while``, ``break`` and
    ``continue``): each that svod does not refuse (a race) assembles for each architecture (rendered once)."""
    from tests.frontend.python_kernels import arguments, generate, load

    renderer, compilers, assembled = CUDARenderer(), [NVRTCCompiler(arch) for arch in ARCHS], 0
    with tempfile.TemporaryDirectory(prefix="svod-ptxas-kernels-") as folder:
        for exits in (False, True):
            (Path(folder) / str(exits)).mkdir()
            for seed in range(12):
                kernel = generate(seed, exits=exits)
                ast = load(kernel, Path(folder) / str(exits), seed).build(*arguments(kernel, seed))
                try:
                    spec = renderer.render(ast)
                except svod.errors.SvodError as err:
                    assert isinstance(err, RaceError), err
                    continue
                for arch, compiler in zip(ARCHS, compilers, strict=True):
                    assemble_ptx(compiler.compile(spec).bytes, arch, kernel=spec.name)
                assembled += 1
    assert assembled >= 12


@requires_nvrtc
@requires_ptxas
def test_ptxas_refusals_name_the_kernel_the_stage_and_what_ptxas_said():
    """PTX for sm_90 is too new for sm_80 (``.target``), and PTX that does not parse: each a ``CompileError`` at
    stage compile with ptxas's message and the PTX."""
    spec = CUDARenderer().render(next(_corpus()))
    ptx = NVRTCCompiler("sm_90").compile(spec).bytes
    with pytest.raises(CompileError, match="ptxas refused the PTX for sm_80") as info:
        assemble_ptx(ptx, "sm_80", kernel="saxpy")
    assert info.value.kernel == "saxpy" and info.value.stage == "compile"
    assert ".target" in info.value.log and info.value.source == ptx.decode()
    broken = ptx.decode().replace("ret;", "ret")
    with pytest.raises(CompileError, match="ptxas refused") as info:
        assemble_ptx(broken, "sm_90", kernel="saxpy")
    assert "saxpy.ptx, line" in info.value.log and "syntax error" in info.value.log
    with pytest.raises(DeviceError, match="sm_90"):
        assemble_ptx(ptx, "hopper")


def test_without_ptxas_assembling_says_what_to_install(monkeypatch):
    monkeypatch.setattr(cuda, "find_ptxas", lambda: None)
    with pytest.raises(DeviceError, match="nvidia-cuda-nvcc") as info:
        assemble_ptx(".version 8.0", "sm_90", kernel="k")
    assert info.value.kernel == "k" and info.value.stage == "device"


@pytest.mark.parametrize("rows", [1 << 20, (1 << 20) + 3])
def test_a_launch_past_the_grids_y_limit_spreads_its_blocks_over_z(rows):
    """A gather of a million 64-wide rows is 2**18 blocks of 4 rows along y, where CUDA allows 65535: the
    H100 refused that launch (CUDA_ERROR_INVALID_VALUE) until the grid's limits joined CUDA's caps."""
    from svod.workloads import gather_kernel

    spec = CUDARenderer().render(gather_kernel(rows, 50_000))
    groups = spec.launch_dims({}).global_size
    assert all(g <= most for g, most in zip(groups, ((1 << 31) - 1, 65535, 65535), strict=True)), groups
    local = spec.launch_dims({}).local_size
    assert local is not None and groups[1] * groups[2] * local[1] >= rows


# ---- on a GPU: plans as CUDA graphs, torch's tensors in place ------------------------------------------------

def _chain_plan(device, count: int):
    """``count`` kernels, each adding its index to the one before's output: ``sum(range(count))`` at the end."""
    from svod.workloads import tiny

    plan = svod.ExecutionPlan(device)
    indices = [plan.add_buffer(svod.Buffer.from_numpy(np.full(16, 1.5, np.float32), device)) for _ in range(count + 1)]
    for k in range(count):
        plan.add_kernel(tiny(k), [indices[k + 1], indices[k]])
    return plan, indices[-1]


def test_a_prepared_plan_replays_as_one_cuda_graph():
    from svod.backends.cuda_graph import GraphReplay

    device = open_device("CUDA:0")
    plan, last = _chain_plan(device, 32)
    for _ in range(3):  # the first run captures the graph, the others relaunch it
        plan.buffers[last].copyin(np.zeros(16, np.float32))
        plan.execute()
        np.testing.assert_array_equal(plan.buffers[last].numpy(), np.full(16, 1.5 + sum(range(32)), np.float32))
    assert isinstance(plan._native, GraphReplay)


def _torch_cuda():
    torch = pytest.importorskip("torch", reason="torch is not installed here (the device check's image has it)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU for torch here (torch.cuda.is_available() is False)")
    open_device("CUDA:0")
    return torch


@svod.kernel
def _scaled_rows(x, s):
    rows, cols = x.shape
    for i in svod.prange(rows):
        for j in range(cols):
            x[i, j] = x[i, j] * s + i


@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (130, 33)])
def test_a_python_kernel_works_on_a_torch_cuda_tensor_in_place(shape):
    torch = _torch_cuda()
    data = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    tensor = torch.from_numpy(data).cuda()
    _scaled_rows(tensor, 2.5)  # the device is the tensor's: no device= needed
    want = data.copy()
    _scaled_rows.fn(want, 2.5)  # the plain-Python run is the oracle
    # svod contracts x * s + i into one fused multiply-add, which rounds once where Python rounds twice
    np.testing.assert_allclose(tensor.cpu().numpy(), want, rtol=2e-7, atol=1e-6)


def test_svod_run_and_torch_share_cuda_memory_both_ways():
    torch = _torch_cuda()
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    out = torch.zeros(1000, dtype=torch.float32, device="cuda")
    svod.run(next(_corpus()), [out, x], device="CUDA:0", n=999)  # saxpy, into torch's own memory
    want = np.arange(1000, dtype=np.float32) * 2 + 1
    want[999] = 0
    np.testing.assert_array_equal(out.cpu().numpy(), want)
    buf = svod.Buffer.from_numpy(np.arange(10, dtype=np.int32), "CUDA:0")
    shared = torch.from_dlpack(buf)  # svod's memory as a torch tensor, no copy
    shared += 5
    torch.cuda.synchronize()
    np.testing.assert_array_equal(buf.numpy(), np.arange(10, dtype=np.int32) + 5)


def test_a_strided_torch_tensor_is_refused_naming_its_strides():
    torch = _torch_cuda()
    transposed = torch.zeros((4, 6), device="cuda").T
    with pytest.raises(svod.errors.BufferMismatchError, match="strides"):
        svod.Buffer.from_dlpack(transposed)


class _RecordingStream:
    """What a CUDA device's stream is asked to do, recorded: a GPU cannot exist here, so this stands in for
    the device's capture calls (the H100 runs the real ones: ``test_a_prepared_plan_replays_as_one_cuda_graph``)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.capturing = False

    def begin_capture(self) -> None:
        self.calls.append("begin")
        self.capturing = True

    def end_capture(self) -> object:
        self.calls.append("end")
        self.capturing = False
        return f"graph{self.calls.count('end')}"

    def abandon_capture(self) -> None:
        self.calls.append("discard")
        self.capturing = False

    def launch_graph(self, executable: object) -> None:
        self.calls.append(f"launch {executable}")

    def synchronize(self) -> None:
        self.calls.append("sync")


def test_graphs_are_kept_per_set_of_values_and_loops_unrolled_into_them():
    from svod.backends.cuda_graph import GRAPHS_KEPT, GraphReplay
    from svod.device import ReplayKernel, ReplayLoop

    stream, launched = _RecordingStream(), []

    def kernel(values):
        launched.append((stream.capturing, values["n"], values.get("t")))

    def whole_loop(values):
        raise AssertionError("a graph unrolls the loop; its Python runner never runs")

    step = ReplayKernel((), {}, kernel, "k")
    loop = ReplayLoop("t", UOp.const(dtypes.index, 0), UOp.define_var("n", 0, 100), UOp.const(dtypes.index, 1),
                      (step,), whole_loop, "loop")
    replay = GraphReplay(stream, [step, loop], ["n"])
    replay.run({"n": 2})
    replay.run({"n": 2})
    assert launched == [(True, 2, None), (True, 2, 0), (True, 2, 1)]  # captured once: the second run relaunched
    assert stream.calls == ["begin", "end", "launch graph1", "sync", "launch graph1", "sync"]
    assert replay.values() == {"n": 2, "t": 1}
    for n in range(3, 3 + GRAPHS_KEPT):  # past the kept sets of values: plain launches, no capture
        launched.clear()
        replay.run({"n": n})
    assert launched == [(False, n, None), *((False, n, t) for t in range(n))]
    assert stream.calls.count("end") == GRAPHS_KEPT


def test_a_graph_holds_no_decision_on_memory():
    """A branch, a while loop and a loop that may end early decide on a value a kernel wrote: a graph, which
    unrolls loops, cannot hold them, and the replayer leaves the plan to Python as it does Python steps."""
    from svod.backends.cuda_graph import replayable
    from svod.device import BufferAddress, HostCondition, ReplayBranch, ReplayKernel, ReplayLoop, ReplayWhile

    def runner(values):
        raise AssertionError("not run")

    step = ReplayKernel((), {}, runner, "k")
    condition = HostCondition(BufferAddress(0, 0, 0), 4, False)
    bounds = (UOp.const(dtypes.index, 0), UOp.const(dtypes.index, 4), UOp.const(dtypes.index, 1))
    assert replayable([step, ReplayLoop("t", *bounds, (step,), runner, "loop")])
    for control in (ReplayLoop("t", *bounds, (step,), runner, "loop", condition),
                    ReplayBranch(condition, (step,), (), runner, "branch"),
                    ReplayWhile(condition, (step,), runner, "while")):
        assert not replayable([step, control])
        assert not replayable([ReplayLoop("s", *bounds, (control,), runner, "outer")])


def test_a_launch_that_fails_in_a_capture_ends_it_and_is_raised():
    from svod.backends.cuda_graph import GraphReplay
    from svod.device import ReplayKernel
    from svod.errors import LaunchError

    stream = _RecordingStream()

    def failing(values):
        raise LaunchError("launch dimension 0 evaluated to non-positive value 0", stage="launch", value=0)

    with pytest.raises(LaunchError):
        GraphReplay(stream, [ReplayKernel((), {}, failing, "k")], ["n"]).run({"n": 0})
    assert stream.calls == ["begin", "discard"]
