"""The public surface of ../shared/API.md exists under the names it gives."""

import svod
from svod import device, runtime

API_OPS = """CONST DEFINE_VAR BIND PARAM SPECIAL RANGE INDEX LOAD STORE REDUCE SINK PROGRAM DEVICE LINEAR SOURCE
BINARY CAST BITCAST AFTER WHERE ADD SUB MUL FDIV IDIV MOD MAX NEG ABS CMPLT CMPNE CMPEQ EXP2 LOG2 SIN SQRT
RECIPROCAL""".split()


def test_top_level_names():
    for name in ("dtypes", "DType", "DeviceSpec", "UOp", "Ops", "AxisKind", "Buffer", "KernelBuilder", "get_device",
                 "compiler_pair", "available_devices", "compile", "run", "ExecutionPlan", "errors"):
        assert hasattr(svod, name), name


def test_uop_constructors_and_ops():
    for name in ("const", "index_const", "define_var", "bind", "param", "range", "special", "index", "load", "store",
                 "reduce", "sink", "device", "linear", "source", "binary", "program", "cast", "bitcast", "where",
                 "after", "maximum", "exp2", "log2", "sin", "sqrt", "reciprocal", "lt", "eq", "ne", "toposort", "key"):
        assert hasattr(svod.UOp, name), name
    for name in API_OPS:
        assert hasattr(svod.Ops, name), name
    assert {k.name for k in svod.AxisKind} >= {"GLOBAL", "LOOP", "REDUCE", "LOCAL"}


def test_device_contract_names():
    for name in ("Variable", "ConcreteLaunchDims", "ProgramSpec", "CompiledSpec", "Program", "Compiler", "Renderer",
                 "Device"):
        assert hasattr(device, name), name
    for name in ("add_var", "set_work_sizes", "set_launch_dims", "launch_dims", "resolve_launch_dims",
                 "set_var_names", "set_buffer_metadata", "apply_derived_metadata_from_ast", "from_uop"):
        assert hasattr(device.ProgramSpec, name), name
    for name in ("from_source", "from_bytes", "from_source_with_sizes"):
        assert hasattr(device.CompiledSpec, name), name
    cpu = svod.get_device("CPU")
    for name in ("device", "allocator", "compilers", "renderer", "compiler", "runtime", "base_device_key"):
        assert hasattr(cpu, name), name


def test_runtime_names():
    assert hasattr(runtime, "CachedKernel") and hasattr(runtime, "ExecutionPlan")
    fields = runtime.CachedKernel.__dataclass_fields__
    for name in ("program", "device", "code", "entry_point", "var_names", "globals", "outs", "ins",
                 "host_parallel_safe", "global_size", "local_size"):
        assert name in fields, name
    for name in ("id", "kernel", "buffer_indices", "output_indices", "vals", "fixedvars", "dependencies",
                 "runtime_vars", "ast", "device", "buffer_ids"):
        assert name in runtime.PreparedKernel.__dataclass_fields__, name
    for name in ("add_buffer", "add_kernel", "add_copy", "prepare", "execute", "execute_with_vars", "buffers",
                 "prepared_kernels", "export_trace"):
        assert hasattr(svod.ExecutionPlan("CPU"), name), name
