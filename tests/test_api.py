"""Every name of ../shared/API.md, used as the page says, with values checked: a name that exists but does
something else fails here. Each test uses only the public spellings (``svod.X``, ``svod.device.X``,
``svod.runtime.X``)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import svod
from svod import AxisKind, Ops, UOp, dtypes
from svod.codegen.lower_cpu import CHUNKS_PER_THREAD
from svod.device import CompiledSpec, ConcreteLaunchDims, Device, ProgramSpec, Variable
from svod.ir import PatternMatcher
from svod.runtime import CachedKernel, PreparedKernel

API_OPS = """CONST DEFINE_VAR BIND PARAM SPECIAL RANGE INDEX LOAD STORE REDUCE SINK PROGRAM DEVICE LINEAR SOURCE
BINARY CAST BITCAST AFTER WHERE ADD SUB MUL FDIV IDIV MOD MAX NEG ABS CMPLT CMPNE CMPEQ EXP2 LOG2 SIN SQRT
RECIPROCAL""".split()


def _saxpy(limit: int = 1 << 24) -> UOp:
    """The builder example of API.md, as written there (``n`` up to ``limit``)."""
    k = svod.KernelBuilder("saxpy")
    n = k.var("n", 1, limit)
    out = k.buffer(svod.dtypes.float32, n)
    x = k.buffer(svod.dtypes.float32, n)
    i = k.range(n)
    k.store(out[i], x[i] * 2.0 + 1.0)
    return k.build()


def test_dtypes_and_device_specs():
    sizes = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4,
             "uint64": 8, "float16": 2, "float32": 4, "float64": 8}
    for name, size in sizes.items():
        dt = getattr(dtypes, name)
        assert isinstance(dt, svod.DType) and dt.name == name and dt.itemsize == size
        assert dt.numpy == np.dtype(name) and dtypes.from_numpy(np.dtype(name)) is dt
    assert dtypes.index.itemsize == 8
    assert UOp.param(0, dtypes.float32, 16).dtype == dtypes.float32.ptr(16)
    spec = svod.DeviceSpec.parse("cuda:1")
    assert (str(spec), spec.base_type, spec.device_id) == ("CUDA:1", "CUDA", 1)
    assert svod.DeviceSpec.parse("CUDA").device_id == 0
    assert [str(svod.DeviceSpec.parse(n)) for n in ("cpu", "python", "cl:0")] == ["CPU", "PYTHON", "CL:0"]
    with pytest.raises(svod.errors.SvodError):
        svod.DeviceSpec.parse("no-such-device")


def test_uops_are_hash_consed_sorted_and_keyed_alike_in_every_process():
    three = UOp.const(dtypes.int32, 3)
    assert three is UOp.const(dtypes.int32, 3) and three == UOp.const(dtypes.int32, 3)
    assert (three.op, three.dtype, three.src, three.arg) == (Ops.CONST, dtypes.int32, (), 3)
    assert three != UOp.const(dtypes.int32, 4)
    total = three + UOp.const(dtypes.int32, 4) * three
    order = total.toposort()
    assert order[-1] is total and set(order) == {three, UOp.const(dtypes.int32, 4), total.src[1], total}
    assert all(order.index(s) < order.index(u) for u in order for s in u.src)
    code = "import svod; print(svod.UOp.const(svod.dtypes.int32, 3).key)"
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2")}
    assert keys == {three.key} and int(three.key, 16) >= 0


def test_uop_constructors_build_the_nodes_they_name():
    n = UOp.define_var("n", 1, 8)
    assert (n.op, n.dtype, n.arg) == (Ops.DEFINE_VAR, dtypes.index, ("n", 1, 8))
    assert n.bind(5).op is Ops.BIND and n.bind(5).src == (n, UOp.index_const(5))
    assert UOp.index_const(7).dtype == dtypes.index and UOp.index_const(7).arg == 7
    p = UOp.param(0, dtypes.float32, n)
    r = UOp.range(n, 0)
    assert r.op is Ops.RANGE and r.src == (n,) and AxisKind.GLOBAL in r.arg
    assert UOp.range(4, 1, AxisKind.LOOP).arg != UOp.range(4, 1, AxisKind.REDUCE).arg
    special = UOp.special(4, "gidx0")
    assert special.op is Ops.SPECIAL and special.arg == "gidx0"
    assert p.index(r) is p[r] and p[r].op is Ops.INDEX
    load = p[r].load()
    store = p[r].store(load + 1.0)
    assert load.op is Ops.LOAD and load.dtype == dtypes.float32 and store.op is Ops.STORE
    red = UOp.range(n, 1, AxisKind.REDUCE)
    summed = p[red].load().reduce(red, op=Ops.ADD)
    assert summed.op is Ops.REDUCE and summed.arg is Ops.ADD and red in summed.src
    sink = UOp.sink(store)
    assert sink.op is Ops.SINK and sink.src == (store,)
    assert load.cast(dtypes.int32).op is Ops.CAST and load.cast(dtypes.int32).dtype == dtypes.int32
    assert load.bitcast(dtypes.uint32).op is Ops.BITCAST
    picked = load.lt(0.0).where(load, -load)
    assert picked.op is Ops.WHERE and picked.src[0].op is Ops.CMPLT and picked.src[0].dtype == dtypes.bool
    assert (load < 0.0) is load.lt(0.0) and load.eq(1.0).op is Ops.CMPEQ and load.ne(1.0).op is Ops.CMPNE
    assert p.after(store).op is Ops.AFTER and p.after(store).src == (p, store)
    stages = (UOp.device("CPU"), UOp.linear(store), UOp.source("code"), UOp.binary(b"\x7fELF"))
    assert [s.op for s in stages] == [Ops.DEVICE, Ops.LINEAR, Ops.SOURCE, Ops.BINARY]
    assert stages[2].arg == "code" and stages[3].arg == b"\x7fELF"
    program = UOp.program(sink, *stages)
    assert program.op is Ops.PROGRAM and program.src == (sink, *stages)
    spec = ProgramSpec.from_uop(program)
    assert spec.src == "code" and spec.globals == [0] and spec.outs == [0] and spec.ins == [0]
    assert {o.name for o in Ops} >= set(API_OPS)
    assert {k.name for k in AxisKind} >= {"GLOBAL", "LOOP", "REDUCE", "LOCAL"}


def test_uop_arithmetic_computes_what_numpy_and_c_compute():
    """Each operator of API.md in one kernel, run on CPU and compared with numpy (``//`` and ``%`` truncate
    toward zero, as C does)."""
    n = 9
    a = UOp.param(0, dtypes.int32, n)
    b = UOp.param(1, dtypes.int32, n)
    f = UOp.param(2, dtypes.float32, n)
    outs = [UOp.param(3 + j, dtype, n) for j, dtype in enumerate([dtypes.int32] * 7 + [dtypes.float32] * 7)]
    i = UOp.range(n, 0)
    x, y, v = a[i].load(), b[i].load(), f[i].load()
    ints = [x + y, x - y, x * y, x // y, x % y, abs(-x), x.maximum(y)]
    floats = [v / 4.0, v.exp2(), v.log2(), v.sin(), v.sqrt(), v.reciprocal(), v.lt(2.0).where(v, v * 3)]
    ast = UOp.sink(*(o[i].store(e) for o, e in zip(outs, ints + floats, strict=True)), name="arith")
    xa = np.array([-7, 7, -7, 7, 0, 5, -9, 100, 1], np.int32)
    ya = np.array([2, -2, -2, 2, 3, 5, 4, -7, 1], np.int32)
    fa = np.linspace(0.25, 9.0, n, dtype=np.float32)
    arrays = [xa, ya, fa, *(np.zeros(n, np.int32) for _ in range(7)), *(np.zeros(n, np.float32) for _ in range(7))]
    svod.run(ast, arrays)
    trunc_div = np.trunc(xa / ya).astype(np.int32)
    expected_ints = [xa + ya, xa - ya, xa * ya, trunc_div, xa - trunc_div * ya, np.abs(xa), np.maximum(xa, ya)]
    for got, want in zip(arrays[3:10], expected_ints, strict=True):
        np.testing.assert_array_equal(got, want)
    expected_floats = [fa / 4, np.exp2(fa), np.log2(fa), np.sin(fa), np.sqrt(fa), 1 / fa, np.where(fa < 2, fa, fa * 3)]
    for got, want in zip(arrays[10:], expected_floats, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_buffers_copy_view_and_describe_themselves():
    source = np.arange(10, dtype=np.float32)
    buf = svod.Buffer.from_numpy(source)
    source[0] = 99.0  # from_numpy copied
    assert buf.device == "CPU" and buf.dtype == dtypes.float32 and buf.size == 10 and buf.nbytes == 40
    first = buf.numpy()
    first[1] = -1.0  # numpy() is a copy
    np.testing.assert_array_equal(buf.numpy(), np.arange(10, dtype=np.float32))
    view = buf.view(4, 3)
    assert view.size == 3
    np.testing.assert_array_equal(view.numpy(), [4.0, 5.0, 6.0])
    view.copyin(np.array([40, 50, 60], np.float32))  # zero copy: the base sees it
    np.testing.assert_array_equal(buf.numpy()[3:8], [3.0, 40.0, 50.0, 60.0, 7.0])
    with pytest.raises(svod.errors.SvodError):
        view.copyin(np.zeros(4, np.float32))
    with pytest.raises(svod.errors.SvodError):
        view.copyin(np.zeros(3, np.int32))
    fresh = svod.Buffer("PYTHON", dtypes.int16, 5)
    assert fresh.device == "PYTHON" and fresh.nbytes == 10
    fresh.copyin(np.arange(5, dtype=np.int16))
    np.testing.assert_array_equal(fresh.numpy(), np.arange(5, dtype=np.int16))


def test_builder_run_and_compile():
    ast = _saxpy()
    assert ast.op is Ops.SINK
    x = np.linspace(-2, 2, 100, dtype=np.float32)
    out = np.zeros(100, np.float32)
    svod.run(ast, [out, x], n=100)  # numpy arrays: the written one is copied back in place
    np.testing.assert_array_equal(out, x * np.float32(2) + np.float32(1))
    buffers = [svod.Buffer("PYTHON", dtypes.float32, 100), svod.Buffer.from_numpy(x, "PYTHON")]
    svod.run(ast, buffers, device=svod.get_device("PYTHON"), n=60)
    np.testing.assert_array_equal(buffers[0].numpy()[:60], out[:60])
    kernel = svod.compile(ast, "CPU")
    assert isinstance(kernel, CachedKernel) and svod.compile(ast, svod.get_device("CPU")) is kernel
    assert kernel.device.device == svod.DeviceSpec.parse("CPU") and kernel.entry_point in kernel.code
    assert "n" in kernel.var_names and kernel.globals == (0, 1) and kernel.outs == (0,) and kernel.ins == (1,)
    threads = svod.get_device("CPU").caps.threads  # one launch; the kernel splits itself over the threads
    assert kernel.host_parallel_safe is True and "core_id" not in kernel.var_names  # an argument, not a variable
    assert [g.arg for g in kernel.global_size[1:]] == [1, 1]
    # as many chunks as the sizes give work to: CHUNKS_PER_THREAD a thread for 2**24 elements, which the threads
    # claim one at a time; one, the caller's alone, for 100
    assert kernel.launch.dims({"n": 1 << 24}).global_size == (threads * CHUNKS_PER_THREAD, 1, 1)
    assert kernel.launch.dims({"n": 100}).global_size == (1, 1, 1)
    assert kernel.local_size is not None and [g.arg for g in kernel.local_size] == [1, 1, 1]
    assert kernel.program.name == "saxpy"
    assert {"CPU", "PYTHON"} <= set(svod.available_devices())
    assert all(str(svod.get_device(name).device) == name for name in svod.available_devices())


def test_compiler_pairs_and_the_device_contract():
    """Render and compile ahead of time, load with the device's runtime factory and execute by hand."""
    renderer, compiler = svod.compiler_pair("CPU")
    assert str(renderer.device) == "CPU" and isinstance(compiler.cache_key, str) and compiler.cache_key
    spec = renderer.render(_saxpy())
    assert isinstance(spec, ProgramSpec) and spec.name == "saxpy" and spec.device == svod.DeviceSpec.parse("CPU")
    assert spec.globals == [0, 1] and spec.outs == [0] and spec.ins == [1] and spec.buf_count == 2
    assert "n" in spec.var_names and spec.var_names == sorted(spec.var_names)
    assert [v.name for v in spec.vars] == spec.var_names and Variable("n", 1, 1 << 24) in spec.vars
    compiled = compiler.compile(spec)
    assert isinstance(compiled, CompiledSpec) and compiled.name == "saxpy" and compiled.bytes
    assert list(compiled.var_names) == spec.var_names and compiled.buf_count == 2
    cpu = svod.get_device("CPU")
    assert isinstance(cpu, Device) and cpu.renderer is cpu.compilers[0][0] and cpu.compiler is cpu.compilers[0][1]
    assert cpu.allocator is not None and cpu.base_device_key() == "CPU"
    by_hand = Device("CUDA:1", cpu.allocator, cpu.renderer, cpu.compiler, cpu.runtime)
    assert str(by_hand.device) == "CUDA:1" and by_hand.base_device_key() == "CUDA"
    program = cpu.runtime(compiled)
    out, x = svod.Buffer("CPU", dtypes.float32, 8), svod.Buffer.from_numpy(np.arange(8, dtype=np.float32))
    values = {"n": 8}
    dims = spec.launch_dims(values)
    assert isinstance(dims, ConcreteLaunchDims) and dims.global_size[1:] == (1, 1)
    program.execute([out.address, x.address], [values[v] for v in spec.var_names], dims.global_size,
                    dims.local_size)
    np.testing.assert_array_equal(out.numpy(), np.arange(8, dtype=np.float32) * 2 + 1)
    assert isinstance(renderer.decompositor(), PatternMatcher)  # the rewrites this CPU renderer needs


def test_program_spec_setters_and_launch_errors():
    n = UOp.define_var("n", 1, 4)
    p = UOp.param(0, dtypes.int32, n)
    i = UOp.range(n, 0)
    spec = ProgramSpec("k", "src", "CL:0", UOp.sink(p[i].store(p[i].load() + 1)))
    assert [g.arg for g in spec.global_size] == [1, 1, 1] and [s.arg for s in spec.local_size] == [1, 1, 1]
    assert spec.vars == [] and spec.globals == []
    spec.apply_derived_metadata_from_ast()
    assert spec.vars == [Variable("n", 1, 4)] and spec.globals == [0] and spec.outs == [0] and spec.ins == [0]
    spec.add_var(Variable("a", 0, 3))
    assert spec.var_names == ["a", "n"]
    spec.set_var_names(["n"])
    assert spec.var_names == ["n"]
    spec.set_buffer_metadata([2, 0, 2], [2], [0])
    assert spec.globals == [0, 2] and spec.outs == [2] and spec.ins == [0] and spec.buf_count == 2
    spec.set_work_sizes([4, 2, 1], [2, 1, 1])
    assert spec.launch_dims({}) == ConcreteLaunchDims((4, 2, 1), (2, 1, 1))
    spec.set_launch_dims([n * 3, UOp.index_const(1), UOp.index_const(1)], None)
    assert spec.launch_dims({"n": 2}) == ConcreteLaunchDims((6, 1, 1), None)
    resolve = ProgramSpec.resolve_launch_dims
    with pytest.raises(svod.errors.SvodError, match=r"variable n=5 is outside bounds \[1, 4\]"):
        spec.launch_dims({"n": 5})
    with pytest.raises(svod.errors.SvodError, match="missing runtime value for launch-size variable n"):
        spec.launch_dims({})
    with pytest.raises(svod.errors.SvodError, match="launch dimension 0 evaluated to non-positive value 0"):
        resolve([n - 1, UOp.index_const(1), UOp.index_const(1)], None, {"n": 1})
    with pytest.raises(svod.errors.SvodError, match="invalid launch-size arithmetic"):
        resolve([n // (n - 1), UOp.index_const(1), UOp.index_const(1)], None, {"n": 1})
    with pytest.raises(svod.errors.SvodError, match="must be integer"):
        resolve([UOp.const(dtypes.float32, 2.0), UOp.index_const(1), UOp.index_const(1)], None, {})
    with pytest.raises(svod.errors.SvodError, match="unsupported"):
        resolve([n.alu(Ops.XOR, 1), UOp.index_const(1), UOp.index_const(1)], None, {"n": 1})
    with pytest.raises(svod.errors.SvodError, match="expected PROGRAM"):
        ProgramSpec.from_uop(UOp.sink())
    sized = CompiledSpec.from_source_with_sizes("k", "code", spec.ast, [n, 1, 1], None, 1)
    assert sized.src == "code" and sized.bytes == b"" and sized.global_size[0] is n and sized.local_size is None
    assert CompiledSpec.from_source("k", "code", spec.ast, 1).var_names == ("n",)
    assert CompiledSpec.from_bytes("k", b"\x01", spec.ast).bytes == b"\x01"


def test_execution_plans():
    plan = svod.ExecutionPlan(device="CPU")
    x = plan.add_buffer(svod.Buffer.from_numpy(np.arange(16, dtype=np.float32)))
    y = plan.add_buffer(svod.Buffer("CPU", dtypes.float32, 16))
    z = plan.add_buffer(svod.Buffer("CPU", dtypes.float32, 16))
    first = plan.add_kernel(_saxpy(16), [y, x])
    copy = plan.add_copy(z, y)
    second = plan.add_kernel(_saxpy(16), [x, z], fixedvars={"n": 4})
    plan.prepare()
    assert plan.buffers[x].size == 16 and len(plan.buffers) == 3
    prepared = {p.id: p for p in plan.prepared_kernels}
    assert set(prepared) == {first, second} and copy not in prepared
    late = prepared[second]
    assert isinstance(late, PreparedKernel) and late.dependencies == (first, copy)
    assert late.buffer_indices == (x, z) and late.output_indices == (x,) and late.kernel is prepared[first].kernel
    assert late.fixedvars == {"n": 4} and late.runtime_vars == ()
    assert [v.name for v in prepared[first].runtime_vars] == ["n"]
    plan.execute(n=16)
    ramp = np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(plan.buffers[z].numpy(), ramp * 2 + 1)
    np.testing.assert_array_equal(plan.buffers[x].numpy(), np.concatenate([(ramp[:4] * 2 + 1) * 2 + 1, ramp[4:]]))
    assert prepared[first].vals[prepared[first].kernel.var_names.index("n")] == 16
    before = [b.numpy() for b in plan.buffers]
    with pytest.raises(svod.errors.SvodError, match="unknown variable q"):
        plan.execute(n=16, q=1)
    with pytest.raises(svod.errors.SvodError, match=r"n=0 is outside bounds \[1, 16\]"):
        plan.execute_with_vars({"n": 0})
    for buf, old in zip(plan.buffers, before, strict=True):  # nothing ran
        np.testing.assert_array_equal(buf.numpy(), old)
    other = svod.ExecutionPlan("CPU")
    other.add_kernel(_saxpy(8), [other.add_buffer(svod.Buffer("CPU", dtypes.float32, 8)),
                                other.add_buffer(svod.Buffer.from_numpy(np.ones(8, np.float32)))], fixedvars={"n": 8})
    with pytest.raises(svod.errors.SvodError, match="fixed"):
        other.execute(n=8)


def test_errors_are_one_hierarchy():
    errors = svod.errors
    for name in ("DeviceError", "GraphError", "VariableError", "LaunchError", "BufferMismatchError",
                 "IndexOutOfBoundsError", "CompileError", "RaceError", "LinAlgError"):
        assert issubclass(getattr(errors, name), errors.SvodError), name
    with pytest.raises(errors.SvodError) as raised:
        svod.run(_saxpy(), [np.zeros(4, np.float32), np.zeros(4, np.float32)], n=99)
    assert raised.value.kernel == "saxpy" and "99" in str(raised.value)
