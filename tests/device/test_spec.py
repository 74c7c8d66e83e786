import math

import numpy as np
import pytest

import svod
from svod.device import CompiledSpec, KernelMetadata, ProgramSpec, Variable, derive_metadata
from svod.device.spec import ONES, scalar_bits
from svod.dtype import DeviceSpec, dtypes
from svod.errors import GraphError, VariableError
from svod.ir import Ops, UOp
from tests.helpers import open_device
from tests.kernels import SMALL_WORKLOADS

ONE = UOp.index_const(1)


def elementwise(n_max=1024):
    n = UOp.define_var("n", 1, n_max)
    m = UOp.define_var("m", 0, 7)
    out, a, b = (UOp.param(s, dtypes.float32, n) for s in (2, 0, 1))
    i = UOp.range(n, 0)
    return UOp.sink(out[i].store(a[i] + b[i] * m.cast(dtypes.float32)), name="ew"), n


def test_new_spec_defaults():
    sink, _ = elementwise()
    spec = ProgramSpec("k", "src", "cpu", sink)
    assert spec.device == DeviceSpec("CPU")
    assert spec.global_size == ONES and spec.local_size == ONES
    assert spec.vars == [] and spec.globals == [] and spec.buf_count == 0


def test_derived_metadata():
    sink, _ = elementwise()
    spec = ProgramSpec("k", "src", "CPU", sink)
    spec.apply_derived_metadata_from_ast()
    assert spec.vars == [Variable("m", 0, 7), Variable("n", 1, 1024)]
    assert spec.var_names == ["m", "n"]
    assert spec.globals == [0, 1, 2] and spec.outs == [2] and spec.ins == [0, 1]
    assert spec.buf_count == 3


def test_store_under_cast_marks_an_out():
    p = UOp.param(0, dtypes.int32, 4)
    idx = p[UOp.index_const(0)]
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.CAST, idx.dtype, (idx,)), UOp.const(dtypes.int32, 1)))
    assert derive_metadata(UOp.sink(store)).outs == (0,)


def test_cpu_threads_set_global_size_from_core_id():
    core = UOp.define_var("core_id", 0, 7)
    p = UOp.param(0, dtypes.int32, 8)
    meta = derive_metadata(UOp.sink(p[core].store(UOp.const(dtypes.int32, 1))))
    assert meta.global_size[0].arg == 8 and meta.local_size == ONES
    assert meta.var_names == ()  # the worker number is an argument of the CPU ABI, not a variable


def _gpu_kernel(*names_and_sizes):
    p = UOp.param(0, dtypes.float32, 1 << 20)
    idx = UOp.index_const(0)
    for name, size in names_and_sizes:
        idx = idx + UOp.special(size, name)
    return UOp.sink(p[idx].store(1.0))


def test_gpu_specials():
    n = UOp.define_var("n", 1, 4096)
    meta = derive_metadata(_gpu_kernel(("gidx0", n // 32), ("lidx0", 32), ("gidx1", 3), ("lidx1", 2)))
    assert meta.global_size[0] is n // 32 and meta.global_size[1].arg == 3
    assert meta.local_size is not None and meta.local_size[0].arg == 32 and meta.local_size[1].arg == 2


def test_direct_index_drops_local_size():
    meta = derive_metadata(_gpu_kernel(("idx0", 100), ("idx2", 5)))
    assert [g.arg for g in meta.global_size] == [100, 1, 5]
    assert meta.local_size is None


@pytest.mark.parametrize("name", ["gidx3", "warp", "lane_id", "g"])
def test_special_names_that_name_no_axis_are_ignored(name):
    meta = derive_metadata(_gpu_kernel((name, 64)))
    assert meta.global_size == ONES and meta.local_size == ONES


def test_conflicting_variable_bounds():
    a, b = UOp.define_var("n", 1, 4), UOp.define_var("n", 1, 5)
    p = UOp.param(0, dtypes.index, 8)
    with pytest.raises(GraphError, match="two different bounds"):
        derive_metadata(UOp.sink(p[0].store(a + b)))


def test_setters():
    sink, n = elementwise()
    spec = ProgramSpec("k", "src", "CL:0", sink)
    spec.add_var(Variable("z", 0, 1))
    spec.add_var(Variable("a", 0, 1))
    spec.add_var(Variable("a", 0, 1))
    assert spec.var_names == ["a", "z"]
    spec.set_work_sizes([4, 2, 1], [2, 1, 1])
    assert [g.arg for g in spec.global_size] == [4, 2, 1]
    spec.set_launch_dims([n * 2, 1, 1], None)
    assert spec.launch_dims({"n": 5}).global_size == (10, 1, 1)
    assert spec.launch_dims({"n": 5}).local_size is None
    spec.set_buffer_metadata([3, 1, 1], [3], [1])
    assert spec.globals == [1, 3] and spec.buf_count == 2
    with pytest.raises(GraphError, match="three dimensions"):
        spec.set_work_sizes([1, 1], None)


def _program(sink, metadata=None, stages=None):
    default = [sink, UOp.device("CPU"), UOp.linear(), UOp.source("int main;")]
    return UOp(Ops.PROGRAM, dtypes.void, tuple(default if stages is None else stages), metadata)


def test_from_uop_derives_metadata():
    sink, _ = elementwise()
    spec = ProgramSpec.from_uop(_program(sink))
    assert spec.name == "ew" and spec.src == "int main;" and spec.device == DeviceSpec("CPU")
    assert spec.globals == [0, 1, 2] and spec.var_names == ["m", "n"]


def test_from_uop_rejects_non_program():
    with pytest.raises(GraphError, match="expected PROGRAM"):
        ProgramSpec.from_uop(UOp.sink())


@pytest.mark.parametrize(("position", "stage"), [(0, "SINK"), (1, "DEVICE"), (2, "LINEAR"), (3, "SOURCE")])
def test_from_uop_names_the_wrong_stage(position, stage):
    sink, _ = elementwise()
    stages = [sink, UOp.device("CPU"), UOp.linear(), UOp.source("x")]
    stages[position] = UOp.binary(b"junk")
    with pytest.raises(GraphError, match=stage):
        ProgramSpec.from_uop(_program(sink, stages=stages))


@pytest.mark.parametrize(("count", "stage"), [(2, "LINEAR"), (3, "SOURCE")])
def test_from_uop_names_the_missing_stage(count, stage):
    sink, _ = elementwise()
    stages = [sink, UOp.device("CPU"), UOp.linear(), UOp.source("x")][:count]
    with pytest.raises(GraphError, match=f"missing its {stage}"):
        ProgramSpec.from_uop(_program(sink, stages=stages))


def test_from_uop_checks_binary_stage():
    sink, _ = elementwise()
    stages = [sink, UOp.device("CPU"), UOp.linear(), UOp.source("x"), UOp.source("not bytes")]
    with pytest.raises(GraphError, match="BINARY"):
        ProgramSpec.from_uop(_program(sink, stages=stages))
    ok = [*stages[:4], UOp.binary(b"\x7fELF")]
    assert ProgramSpec.from_uop(_program(sink, stages=ok)).name == "ew"


def test_metadata_wins_field_by_field_when_set():
    sink, _ = elementwise()
    meta = KernelMetadata(name="renamed", outs=(0, 2), vars=(Variable("q", 0, 3),))
    spec = ProgramSpec.from_uop(_program(sink, meta))
    assert spec.name == "renamed"
    assert spec.outs == [0, 2] and spec.ins == [0, 1] and spec.globals == [0, 1, 2]
    assert spec.var_names == ["q"]
    assert spec.global_size == ONES


def test_metadata_launch_sizes_win_only_when_not_all_ones():
    core = UOp.define_var("core_id", 0, 3)
    p = UOp.param(0, dtypes.int32, 8)
    sink = UOp.sink(p[core].store(UOp.const(dtypes.int32, 1)))
    assert ProgramSpec.from_uop(_program(sink, KernelMetadata())).global_size[0].arg == 4
    sized = KernelMetadata(global_size=(UOp.index_const(9), ONE, ONE))
    assert ProgramSpec.from_uop(_program(sink, sized)).global_size[0].arg == 9


def test_compiled_spec_constructors():
    sink, n = elementwise()
    src = CompiledSpec.from_source("ew", "code", sink, 3)
    assert src.src == "code" and src.bytes == b"" and src.var_names == ("m", "n") and src.buf_count == 3
    data = CompiledSpec.from_bytes("ew", b"\x00\x01", sink)
    assert data.bytes == b"\x00\x01" and data.src is None and data.buf_count == 3
    sized = CompiledSpec.from_source_with_sizes("ew", "code", sink, [n, 1, 1], None, 3)
    assert sized.global_size[0] is n and sized.local_size is None


def _fields(spec: ProgramSpec) -> tuple:
    return (spec.name, spec.src, spec.device, spec.ast, spec.global_size, spec.local_size, spec.vars, spec.var_names,
            spec.globals, spec.outs, spec.ins, spec.buf_count, spec.status_slot, spec.loop_turns, spec.fixed_vars,
            spec.entry)


@pytest.mark.parametrize("device", ["CPU", "CL:0", "CUDA:0", "PYTHON", "WEBGPU:0"])
def test_the_pipeline_derives_a_programs_metadata_whole(device):
    """svod's own path reads a PROGRAM's metadata (``of``) where a hand-made one derives it (``from_uop``): the
    pipeline must attach all of it, or a compiler would be handed a spec with fields missing."""
    renderer = open_device(device).renderer
    for make in (SMALL_WORKLOADS["softmax"], SMALL_WORKLOADS["histogram"], SMALL_WORKLOADS["matmul"]):
        for part in renderer.parts(make().steps[0].ast):
            program = renderer.program(part)
            read, derived = ProgramSpec.of(program), ProgramSpec.from_uop(program)
            assert _fields(read) == _fields(derived) and read.globals and read.outs
    n = svod.KernelBuilder("scaled")
    out, x = n.buffer(dtypes.float32, 8), n.buffer(dtypes.float32, 8)
    count = n.var("count", 1, 8)
    i = n.range(count)
    n.store(out[i], x[i] * 2.0)
    read = ProgramSpec.of(renderer.program(n.build()))
    assert read.var_names == ["count"] and read.outs == [0] and read.ins == [1]


def test_a_spec_reads_its_program_and_its_setters_replace_that_programs_metadata():
    sink, n = elementwise()
    spec = ProgramSpec("k", "src", "CL:0", sink)
    spec.apply_derived_metadata_from_ast()
    spec.set_launch_dims([n * 2, 1, 1], None)
    meta = spec.program.arg
    assert isinstance(meta, KernelMetadata) and meta.name == "k" and meta.entry == spec.entry
    assert meta.var_names == ("m", "n") and meta.globals == (0, 1, 2) and meta.local_size is None
    assert spec.program.src[0] is sink and spec.program.src[3].arg == "src"
    compiled = CompiledSpec.from_spec(spec, data=b"\x01\x02")
    assert compiled.program.arg is meta and compiled.bytes == b"\x01\x02" and compiled.src is None
    assert compiled.launch.dims({"n": 3}).global_size == (6, 1, 1) and compiled.buf_count == 3
    assert CompiledSpec.from_spec(spec).src == "src"  # no bytes: a JIT backend loads the source


def test_set_var_names_refuses_a_name_that_is_not_a_variable():
    sink, _ = elementwise()
    spec = ProgramSpec("k", "src", "CPU", sink)
    spec.apply_derived_metadata_from_ast()
    spec.set_var_names(["n", "m"])
    assert spec.var_names == ["n", "m"] and [v.max for v in spec.vars] == [1024, 7]
    with pytest.raises(VariableError, match="variable q is not one of this kernel's"):
        spec.set_var_names(["q"])
    assert spec.var_names == ["n", "m"]


def test_a_compiled_spec_by_hand_refuses_a_buffer_count_its_kernel_does_not_have():
    sink, _ = elementwise()
    with pytest.raises(GraphError, match="takes 3 buffers, not 2"):
        CompiledSpec.from_source("ew", "code", sink, 2)


def test_a_compiled_spec_needs_a_program_with_binary_and_metadata():
    sink, _ = elementwise()
    with pytest.raises(GraphError, match="BINARY"):
        CompiledSpec(_program(sink, KernelMetadata(name="ew")))
    with pytest.raises(GraphError, match="KernelMetadata"):
        CompiledSpec(_program(sink, stages=[sink, UOp.device("CPU"), UOp.linear(), UOp.source("x"), UOp.binary(b"")]))


def test_from_uop_names_the_entry_after_the_name_it_reads():
    sink, _ = elementwise()
    renamed = ProgramSpec.from_uop(_program(sink, KernelMetadata(name="renamed")))
    assert renamed.entry == f"svod_renamed_{sink.key[:12]}"
    kept = ProgramSpec.from_uop(_program(sink, KernelMetadata(name="renamed", entry="given")))
    assert kept.entry == "given"


def test_a_source_edited_by_hand_replaces_the_programs_source_and_drops_its_binary():
    sink, _ = elementwise()
    stages = [sink, UOp.device("CPU"), UOp.linear(), UOp.source("old"), UOp.binary(b"\x7fELF")]
    spec = ProgramSpec.from_uop(_program(sink, stages=stages))
    spec.src = "new"
    assert spec.src == "new" and [s.op for s in spec.program.src] == [Ops.SINK, Ops.DEVICE, Ops.LINEAR, Ops.SOURCE]
    assert spec.name == "ew" and spec.globals == [0, 1, 2]


FLOATS = [0.0, -0.0, 1.0, -2.5, 0.1, 1 / 3, 1e-45, 1.4e-45, 5e-324, 1e-320, 3.4028234663852886e38,
          3.4028235677973366e38, 3.4028236e38, -3.5e38, 1e300, -1e300, 1.7976931348623157e308, math.inf, -math.inf,
          math.nan, -math.nan, 1.0000000596046448, 1.0000001788139343, 16777217.0]


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
@pytest.mark.parametrize("value", FLOATS)
def test_a_python_floats_bits_are_those_numpy_casts_it_to(dtype, value):
    """A float scalar's bits, packed without numpy, are those of numpy's cast (rounded to nearest, infinite past
    the largest finite value, a NaN kept a NaN), as read by a signed integer of the dtype's size."""
    signed = np.int32 if dtype is dtypes.float32 else np.int64
    with np.errstate(over="ignore"):
        want = int(np.array(value, dtype=dtype.numpy).view(signed))
    assert scalar_bits("s", value, dtype) == want
    assert Variable("s", int(np.iinfo(signed).min), int(np.iinfo(signed).max), dtype).checked(value) == want
