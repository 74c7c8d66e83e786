"""The PYTHON reference device: interprets the linearized kernel one instruction at a time.

It is slow and meant to be obviously correct: every value goes through ``svod.ir.alu``, the single
definition of op semantics, and every memory access is bounds-checked against the buffer's declared
size. Other backends are tested against it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from svod.codegen.linearize import linearize
from svod.codegen.render.base import KernelRenderer
from svod.device import CompiledSpec, CompilerBase, ProgramBase, ProgramSpec
from svod.device.launch import evaluate
from svod.errors import SvodError
from svod.ir import Ops, UOp
from svod.ir.alu import bitcast, convert, exec_alu
from svod.ir.uop import param_size, pointee


class PythonRenderer(KernelRenderer):
    """The "source" of a PYTHON kernel is a readable listing of its instructions."""

    def __init__(self) -> None:
        super().__init__("PYTHON", threads=1)

    def render_linear(self, symbol: str, linear: tuple[UOp, ...]) -> str:
        position = {u: i for i, u in enumerate(linear)}
        lines = [f"# kernel {symbol}"]
        for i, u in enumerate(linear):
            args = ", ".join(f"%{position[s]}" for s in u.src if s in position)
            lines.append(f"%{i} = {u.op.name} {u.dtype!r} [{args}] {u.arg!r}")
        return "\n".join(lines) + "\n"


class PythonCompiler(CompilerBase):
    cache_key = "python-reference-1"

    def compile(self, spec: ProgramSpec) -> CompiledSpec:
        return CompiledSpec.from_spec(spec, src=spec.src)


class PythonProgram(ProgramBase):
    """Runs the kernel of ``compiled.ast`` on raw host addresses, once per ``core_id``."""

    def __init__(self, compiled: CompiledSpec) -> None:
        self.name = compiled.name
        self.var_names = compiled.var_names
        self.linear = linearize(compiled.ast)
        self.position = {u: i for i, u in enumerate(self.linear)}
        self.scope_end = {u.src[0]: i for i, u in enumerate(self.linear) if u.op is Ops.END}

    def execute(self, buffers: Sequence[Any], vals: Sequence[int], global_size: tuple[int, int, int] | None = None,
                local_size: tuple[int, int, int] | None = None) -> None:
        var_vals = dict(zip(self.var_names, vals, strict=True))
        for core_id in range(1 if global_size is None else global_size[0]):
            self._run({**var_vals, "core_id": core_id}, buffers)

    def _view(self, param: UOp, buffers: Sequence[Any], var_vals: dict[str, int]) -> np.ndarray:
        dtype = pointee(param).numpy
        size = evaluate(param_size(param), var_vals)
        if size == 0:
            return np.empty(0, dtype)
        raw = (ctypes.c_char * (size * dtype.itemsize)).from_address(buffers[param.arg])
        return np.frombuffer(memoryview(raw), dtype=dtype)

    def _run(self, var_vals: dict[str, int], buffers: Sequence[Any]) -> None:
        values: dict[UOp, Any] = {}
        linear, pc = self.linear, 0
        while pc < len(linear):
            node = linear[pc]
            op = node.op
            if op is Ops.RANGE:
                values[node] = 0
                if values[node.src[0]] <= 0:
                    pc = self.scope_end[node]
            elif op is Ops.IF:
                if not values[node.src[0]]:
                    pc = self.scope_end[node]
            elif op is Ops.END:
                loop = node.src[0]
                if loop.op is Ops.RANGE:
                    values[loop] += 1
                    if values[loop] < values[loop.src[0]]:
                        pc = self.position[loop]
            else:
                values[node] = self._value(node, values, var_vals, buffers)
            pc += 1

    def _value(self, node: UOp, values: dict[UOp, Any], var_vals: dict[str, int], buffers: Sequence[Any]) -> Any:
        op = node.op
        if op is Ops.CONST:
            return node.arg
        if op is Ops.DEFINE_VAR:
            return var_vals[node.arg[0]]
        if op is Ops.PARAM:
            return self._view(node, buffers, var_vals)
        if op is Ops.DEFINE_REG:
            return np.zeros(1, dtype=pointee(node).numpy)
        if op is Ops.AFTER:
            return values[node.src[0]]
        src = [values[s] for s in node.src]
        if op is Ops.INDEX:
            memory, index = src
            if not 0 <= index < len(memory):
                raise SvodError(f"index {index} is outside a buffer of {len(memory)} elements", kernel=self.name,
                                stage="execute", value=index)
            return (memory, index)
        if op is Ops.LOAD:
            memory, index = src[0]
            return convert(memory[index].item(), node.dtype)
        if op is Ops.STORE:
            memory, index = src[0]
            memory[index] = src[1]
            return None
        if op is Ops.CAST:
            return convert(src[0], node.dtype)
        if op is Ops.BITCAST:
            return bitcast(src[0], node.src[0].dtype, node.dtype)
        if op is Ops.SPECIAL:
            raise SvodError("the PYTHON device has no GPU thread indices", kernel=self.name, stage="execute",
                            value=node.arg)
        return exec_alu(op, node.dtype, src)

