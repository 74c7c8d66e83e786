"""Plan bundles: what a prepared plan writes into one file (``ExecutionPlan.save``) and what
``svod.load_plan`` reads back in another process, its kernels loaded without compiling where the bundle's
compiled code fits the device. The file's format is ``svod.runtime.archive``'s; each step kind writes and
reads its own manifest entry (``svod.runtime.steps``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from svod.config import VERSION
from svod.device import Buffer, Device, resolver
from svod.dtype import DeviceSpec, dtypes
from svod.errors import BundleError, BundleWarning, SvodError
from svod.ir import Ops, UOp, kernel_label
from svod.runtime.archive import GraphWriter, is_count, read_bundle, require, write_bundle
from svod.runtime.cache import KernelCache
from svod.runtime.failures import FailureFlag
from svod.runtime.steps import REQUESTS, PreparedKernel, Request, reached_steps


def save_plan(path: str | os.PathLike[str], device: Device, buffers: Sequence[Buffer], names: Mapping[str, int],
              shapes: Mapping[int, tuple[int, ...]], requests: Sequence[Request], top: Sequence[int],
              prepared: Sequence[PreparedKernel], modes: tuple[set[int], set[int]],
              failures: Sequence[FailureFlag] = ()) -> None:
    """Write a prepared plan: its buffers' layout (names, ``shapes``; ``modes``: the buffers it reads, those it
    writes), its steps (``top``: the ids outside every loop), and each distinct kernel's AST and compiled
    PROGRAMs; ``failures``: the flags a run raises for (``svod.runtime.failures``)."""
    writer = GraphWriter()
    storages: dict[int, int] = {}
    storage_list: list[dict[str, Any]] = []
    for buf in buffers:
        if id(buf.base) not in storages:
            storages[id(buf.base)] = len(storage_list)
            storage_list.append({"dtype": buf.base.dtype.name, "size": buf.base.size,
                                 "device": None if buf.base.device_object is device else buf.base.device_object.name})
    read, written = modes
    named = {index: name for name, index in names.items()}
    buffer_list = [{"storage": storages[id(buf.base)], "view": buf.is_view, "offset": buf.offset, "size": buf.size,
                    "dtype": buf.dtype.name, "name": named.get(i), "read": i in read, "written": i in written,
                    **({"shape": list(shapes[i])} if i in shapes else {})}
                   for i, buf in enumerate(buffers)]
    steps = [{"kind": request.kind, **request.manifest(writer)} for request in requests]
    kernels = {}
    for step in prepared:
        if step.ast not in kernels:
            kernels[step.ast] = {"ast": writer.add(step.ast), "key": step.ast.key, "name": step.kernel.name,
                                 "stages": [writer.add(program) for program in step.kernel.program_uops]}  # its parts
    manifest = {"svod": VERSION, "device": device.name, "renderer": device.renderer.cache_key,
                "compiler": device.compiler.cache_key,
                "target": {"cpu": str(getattr(device.compiler, "cpu", "")),
                           "features": str(getattr(device.compiler, "features", ""))},
                "storages": storage_list, "buffers": buffer_list, "steps": steps, "top": list(top),
                "kernels": list(kernels.values()), "failures": [flag.manifest() for flag in failures]}
    write_bundle(path, manifest, writer)


@dataclass(frozen=True)
class SavedPlan:
    """A bundle's plan, read and checked: its device, its buffers (zeroed) with their names and shapes, its steps and
    the ids outside every loop. Its kernels are in the cache it was read with."""

    device: Device
    buffers: list[tuple[Buffer, str | None, tuple[int, ...] | None]]
    requests: list[Request]
    top: list[int]
    failure_flags: list[FailureFlag]


def read_plan(path: str | os.PathLike[str], device: str | Device | None, cache: KernelCache) -> SavedPlan:
    """The plan saved at ``path``, on ``device`` (by default the one it was built for). Where the bundle's
    compiled code fits (the same device kind, renderer and compiler cache keys, which name the CPU, and the
    same svod) its kernels are loaded into ``cache`` without compiling; otherwise the plan compiles them
    again from the ASTs the bundle stores, after one ``BundleWarning`` saying why. A file that is not a
    bundle, or a damaged one, is a ``BundleError`` naming the file."""
    bundle = read_bundle(path)
    manifest, graph, source = bundle.manifest, bundle.graph, bundle.path
    for field_name, kind in (("storages", list), ("buffers", list), ("steps", list), ("top", list),
                             ("kernels", list), ("device", str), ("renderer", str), ("compiler", str), ("svod", str)):
        require(isinstance(manifest.get(field_name), kind), source, f"its manifest has no valid {field_name!r}")
    target = resolver.resolve(manifest["device"] if device is None else device)
    storages = [_load_storage(entry, position, target, source) for position, entry in enumerate(manifest["storages"])]
    buffers = [(_load_buffer(entry, position, storages, source), entry.get("name"), _shape(entry, position, source))
               for position, entry in enumerate(manifest["buffers"])]
    count = len(manifest["steps"])
    requests = [_load_step(entry, position, count, len(buffers), graph, source)
                for position, entry in enumerate(manifest["steps"])]
    placed = list(manifest["top"]) + [i for r in requests for i in r.body()]
    require(sorted(placed) == list(range(count)), source, "its steps are not each placed once, in the plan or a loop")
    stored = _stored_kernels(manifest["kernels"], graph, source)
    reached = reached_steps(requests, manifest["top"])
    kernels = {ast for op_id, request in enumerate(requests) if op_id in reached for ast in request.kernels()}
    require(kernels <= set(stored), source, "a kernel step has no compiled kernel")
    reasons = [why for differs, why in (
        (manifest["svod"] != VERSION, f"svod {manifest['svod']}, this is {VERSION}"),
        (DeviceSpec.parse(manifest["device"]).base_type != target.device.base_type,
         f"device {manifest['device']}, loaded on {target.name}"),
        (manifest["compiler"] != target.compiler.cache_key,
         f"compiler {manifest['compiler']}, this device's is {target.compiler.cache_key}"),
        (manifest["renderer"] != target.renderer.cache_key,
         f"renderer {manifest['renderer']}, this device's is {target.renderer.cache_key}"),
    ) if differs]
    if reasons:
        warnings.warn(f"svod: plan bundle {source} was built for {'; '.join(reasons)}: compiling its {len(stored)} "
                      "kernel(s) again from their stored ASTs", BundleWarning, stacklevel=3)
    else:
        for ast, programs in stored.items():
            try:
                cache.adopt(ast, target, programs)
            except SvodError as err:
                raise BundleError(f"plan bundle {source} holds compiled code that does not load: {err.detail}",
                                  kernel=err.kernel or kernel_label(ast), stage="load", value=str(source)) from err
    flags = [FailureFlag.from_manifest(entry, len(buffers), str(source)) for entry in manifest.get("failures", [])]
    return SavedPlan(target, buffers, requests, list(manifest["top"]), flags)


def _stored_kernels(entries: list[Any], graph: Any, source: Path) -> dict[UOp, list[UOp]]:
    """Each stored kernel's AST, checked against the key it was saved with, and its compiled PROGRAMs."""
    stored = {}
    for position, entry in enumerate(entries):
        require(isinstance(entry, dict) and isinstance(entry.get("stages"), list), source, f"kernel {position} "
                "has no stages")
        ast = graph.get(entry.get("ast"), f"kernel {position}")
        require(ast.op is Ops.SINK and ast.key == entry.get("key"), source,
                f"kernel {entry.get('name')!r} does not have the key it was saved with")
        stored[ast] = [graph.get(i, f"kernel {entry.get('name')!r}") for i in entry["stages"]]
    return stored


def _load_step(entry: Any, position: int, count: int, buffers: int, graph: Any, source: Path) -> Request:
    require(isinstance(entry, dict) and entry.get("kind") in REQUESTS, source,
            f"step {position} is not a {', '.join(REQUESTS)}")
    return REQUESTS[entry["kind"]].from_manifest(entry, position, count, buffers, graph, source)


def _load_storage(entry: Any, position: int, device: Device, source: Path) -> Buffer:
    require(isinstance(entry, dict) and is_count(entry.get("size")) and isinstance(entry.get("dtype"), str),
            source, f"storage {position} has no size and dtype")
    where = entry.get("device")
    try:
        dtype = dtypes.from_name(entry["dtype"])
        return Buffer(device if where is None else where, dtype, entry["size"]).copyin(np.zeros(entry["size"],
                                                                                               dtype.numpy))
    except SvodError as err:
        raise BundleError(f"plan bundle {source}: storage {position} cannot be made: {err.detail}", stage="load",
                          value=entry) from err


def _shape(entry: Any, position: int, source: Path) -> tuple[int, ...] | None:
    shape = entry.get("shape")
    if shape is None:
        return None
    require(isinstance(shape, list) and all(is_count(d) for d in shape) and int(np.prod(shape)) == entry["size"],
            source, f"buffer {position} has a shape that is not its size")
    return tuple(shape)


def _load_buffer(entry: Any, position: int, storages: Sequence[Buffer], source: Path) -> Buffer:
    require(isinstance(entry, dict) and is_count(entry.get("storage")) and entry["storage"] < len(storages) and
            is_count(entry.get("offset")) and is_count(entry.get("size")) and
            (entry.get("name") is None or isinstance(entry.get("name"), str)), source,
            f"buffer {position} is not a storage, offset, size and name")
    storage = storages[entry["storage"]]
    if not entry.get("view"):
        require(entry["size"] == storage.size and entry["offset"] == 0, source, f"buffer {position} does not fit its "
                "storage")
        return storage
    dtype = dtypes.from_name(entry["dtype"]) if isinstance(entry.get("dtype"), str) else storage.dtype
    if dtype != storage.dtype:  # the storage's bytes as numbers of another dtype (a sort's keys: a float's bits)
        require((entry["offset"] + entry["size"]) * dtype.itemsize <= storage.nbytes, source,
                f"buffer {position} does not fit its storage")
        return Buffer(storage.device_object, dtype, entry["size"], base=storage, offset=entry["offset"])
    require(entry["offset"] + entry["size"] <= storage.size, source, f"buffer {position} does not fit its storage")
    return storage.view(entry["offset"], entry["size"])


