"""The plan bundle's file format: a prepared plan in one file, loaded in another process without compiling
(what a plan writes into it and reads back: ``svod.runtime.bundle``).

A bundle is a zip archive of named entries (format ``svod-plan-bundle``, version ``FORMAT_VERSION``)::

    manifest.json        format, version, svod version; the device, renderer and compiler cache keys and
                         the CPU it was built for; buffers (dtype, size, name, device, view of which base
                         at which offset, read / written by the plan); steps in id order (kernels with
                         their buffer indices and fixed variables, copies, loops with their bounds and
                         body); the ids outside every loop; per distinct kernel its AST, its key, and the
                         compiled PROGRAM of each of its parts (under "stages"); the sha256 of graph.json and
                         of every blob
    graph.json           every UOp the manifest refers to (ASTs, compiled PROGRAMs, loop bounds), in one
                         table of nodes, sources before users: [op name, dtype index, source indices, arg]
    blobs/<sha256>       bytes a node holds (a BINARY's compiled code), stored once per content

Args are written in a small tagged JSON form of the types UOps hold (numbers, strings, tuples, dtypes,
the IR's enums, devices, ``Variable``, ``KernelMetadata``, UOps, bytes); nothing else can be written, and
reading builds only those types: a bundle holds no Python code, and the only code it can run is the
kernels' compiled code, which the backend's loader checks (an LLVM object's format, machine and
symbols) like code from the disk cache. A bundle is as trusted as a shared library: load your own.

Reading checks the zip's CRCs, the format and version, the sha256 of the graph and of every blob, and
that each stored kernel's AST has the key it was saved with; anything wrong is a ``BundleError``
naming the file and what is wrong.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from svod.device import KernelMetadata, Variable
from svod.dtype import DeviceSpec, DType, PtrDType, dtypes
from svod.errors import BundleError, SvodError
from svod.ir import AxisKind, Ops, UOp

FORMAT = "svod-plan-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
GRAPH = "graph.json"
BLOBS = "blobs/"

_ENUMS: dict[str, type[Enum]] = {"Ops": Ops, "AxisKind": AxisKind}
_RECORDS: dict[str, type[Any]] = {"Variable": Variable, "KernelMetadata": KernelMetadata}


# ---- the UOp graph ---------------------------------------------------------------------------------------

class GraphWriter:
    """UOps into a table of JSON nodes (each once, its sources and the UOps in its arg before it), and the
    bytes they hold into blobs."""

    def __init__(self) -> None:
        self.nodes: list[list[Any]] = []
        self.dtypes: list[Any] = []
        self.blobs: dict[str, bytes] = {}
        self._index: dict[UOp, int] = {}
        self._dtype_index: dict[DType, int] = {}

    def add(self, root: UOp) -> int:
        """The index of ``root`` in the table, writing whatever of its graph is not there yet."""
        found = self._index.get(root)
        if found is not None:
            return found
        for node in root.toposort():
            if node not in self._index:
                arg = self._arg(node.arg)
                self._index[node] = len(self.nodes)
                self.nodes.append([node.op.name, self._dtype(node.dtype), [self._index[s] for s in node.src], arg])
        return self._index[root]

    def graph(self) -> dict[str, Any]:
        return {"dtypes": self.dtypes, "nodes": self.nodes}

    def _dtype(self, dtype: DType) -> int:
        if dtype not in self._dtype_index:
            if isinstance(dtype, PtrDType):
                encoded: Any = ["ptr", self._dtype(dtype.base), dtype.size, dtype.local]
            else:
                encoded = [dtype.name, dtype.count]
            self._dtype_index[dtype] = len(self.dtypes)
            self.dtypes.append(encoded)
        return self._dtype_index[dtype]

    def _arg(self, arg: Any) -> Any:
        if arg is None or isinstance(arg, (bool, str)):
            return arg
        if isinstance(arg, int):
            return arg
        if isinstance(arg, float):
            return {"t": "float", "v": arg.hex()}
        if isinstance(arg, UOp):
            return {"t": "uop", "v": self.add(arg)}
        if isinstance(arg, bytes):
            digest = hashlib.sha256(arg).hexdigest()
            self.blobs[digest] = arg
            return {"t": "bytes", "v": digest}
        if isinstance(arg, tuple):
            return {"t": "tuple", "v": [self._arg(a) for a in arg]}
        if isinstance(arg, DType):
            return {"t": "dtype", "v": self._dtype(arg)}
        if isinstance(arg, DeviceSpec):
            return {"t": "device", "v": str(arg)}
        if isinstance(arg, Enum) and _ENUMS.get(type(arg).__name__) is type(arg):
            return {"t": type(arg).__name__, "v": arg.name}
        if _RECORDS.get(type(arg).__name__) is type(arg):
            return {"t": type(arg).__name__,
                    "v": {f.name: self._arg(getattr(arg, f.name)) for f in dataclasses.fields(arg)}}
        raise SvodError(f"a UOp arg of type {type(arg).__name__} cannot be written to a plan bundle",
                        stage="plan", value=arg)


class GraphReader:
    """The UOps of a bundle's graph, checked node by node as they are built."""

    def __init__(self, graph: Any, blobs: dict[str, bytes], path: Path) -> None:
        self.path = path
        self.blobs = blobs
        if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list) or \
                not isinstance(graph.get("dtypes"), list):
            raise self._damaged("graph.json is not a table of dtypes and nodes")
        self.dtypes: list[DType] = []
        for position, encoded in enumerate(graph["dtypes"]):
            self.dtypes.append(self._read_dtype(position, encoded))
        self.nodes: list[UOp] = []
        for position, node in enumerate(graph["nodes"]):
            self.nodes.append(self._read_node(position, node))

    def get(self, index: Any, what: str) -> UOp:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self.nodes):
            raise self._damaged(f"{what} refers to node {index!r}, the graph has {len(self.nodes)}")
        return self.nodes[index]

    def _damaged(self, what: str) -> BundleError:
        return BundleError(f"plan bundle {self.path} is damaged: {what}", stage="load", value=str(self.path))

    def _read_dtype(self, position: int, encoded: Any) -> DType:
        try:
            if encoded[0] == "ptr":
                _, base, size, local = encoded
                if not isinstance(base, int) or not 0 <= base < position or not isinstance(size, int) or \
                        not isinstance(local, bool):
                    raise ValueError(encoded)
                return self.dtypes[base].ptr(size, local)
            name, count = encoded
            if not isinstance(count, int) or isinstance(count, bool):
                raise ValueError(encoded)
            return dtypes.from_name(name).vec(count) if count != 1 else dtypes.from_name(name)
        except (SvodError, ValueError, TypeError, IndexError, KeyError) as err:
            raise self._damaged(f"dtype {position} ({encoded!r}) is not one svod knows") from err

    def _read_node(self, position: int, node: Any) -> UOp:
        try:
            op_name, dtype, sources, arg = node
            op = Ops[op_name]
            if not isinstance(dtype, int) or not 0 <= dtype < len(self.dtypes) or not isinstance(sources, list) or \
                    not all(isinstance(s, int) and 0 <= s < position for s in sources):
                raise ValueError("a dtype or source that is not an earlier entry")
            return UOp(op, self.dtypes[dtype], tuple(self.nodes[s] for s in sources), self._read_arg(arg, position))
        except BundleError:
            raise
        except (SvodError, ValueError, TypeError, IndexError, KeyError) as err:
            raise self._damaged(f"node {position} cannot be read ({type(err).__name__}: {err})") from err

    def _read_arg(self, arg: Any, position: int) -> Any:
        if arg is None or isinstance(arg, (bool, int, str)):
            return arg
        if not isinstance(arg, dict) or set(arg) != {"t", "v"}:
            raise ValueError(f"an arg that is not a tagged value: {arg!r}")
        tag, value = arg["t"], arg["v"]
        if tag == "float":
            return float.fromhex(value)
        if tag == "uop":
            if not isinstance(value, int) or not 0 <= value < position:
                raise ValueError(f"an arg that refers to node {value!r}")
            return self.nodes[value]
        if tag == "bytes":
            if value not in self.blobs:
                raise ValueError(f"bytes of blob {value!r}, which the bundle lacks")
            return self.blobs[value]
        if tag == "tuple":
            return tuple(self._read_arg(a, position) for a in value)
        if tag == "dtype":
            return self.dtypes[value]
        if tag == "device":
            return DeviceSpec.parse(value)
        if tag in _ENUMS:
            return _ENUMS[tag][value]
        if tag in _RECORDS:
            record = _RECORDS[tag]
            names = {f.name for f in dataclasses.fields(record)}
            if not isinstance(value, dict) or set(value) != names:
                raise ValueError(f"a {tag} with fields {sorted(value) if isinstance(value, dict) else value!r}")
            return record(**{name: self._read_arg(v, position) for name, v in value.items()})
        raise ValueError(f"an arg of unknown kind {tag!r}")


# ---- the file ----------------------------------------------------------------------------------------------

@dataclass
class BundleFile:
    """What a bundle holds, read and checked: the manifest and the UOps it refers to."""

    path: Path
    manifest: dict[str, Any]
    graph: GraphReader


def write_bundle(path: str | os.PathLike[str], manifest: dict[str, Any], writer: GraphWriter) -> None:
    """Write the bundle in one step: to a temporary file beside ``path``, then renamed over it, so a reader
    never sees half a bundle."""
    target = Path(path)
    graph = json.dumps(writer.graph(), separators=(",", ":"), allow_nan=False).encode()
    manifest = {**manifest, "format": FORMAT, "version": FORMAT_VERSION,
                "graph_sha256": hashlib.sha256(graph).hexdigest(),
                "blobs": {digest: len(data) for digest, data in sorted(writer.blobs.items())}}
    text = json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False).encode()
    directory = target.parent if str(target.parent) else Path(".")
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as err:
        raise SvodError(f"cannot write plan bundle {target}: {err}", stage="plan", value=str(target)) from err
    try:
        with os.fdopen(handle, "wb") as raw, zipfile.ZipFile(raw, "w") as archive:
            archive.writestr(_entry(MANIFEST), text, zipfile.ZIP_DEFLATED)
            archive.writestr(_entry(GRAPH), graph, zipfile.ZIP_DEFLATED)
            for digest, data in sorted(writer.blobs.items()):
                archive.writestr(_entry(BLOBS + digest), data, zipfile.ZIP_STORED)
        os.replace(temporary, target)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(err, OSError):
            raise SvodError(f"cannot write plan bundle {target}: {err}", stage="plan", value=str(target)) from err
        raise


def _entry(name: str) -> zipfile.ZipInfo:
    """An entry with a fixed date: the same plan saves to the same bytes (a bundle's hash names its
    content, as ``svod.distributed`` relies on)."""
    return zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))


_DAMAGE = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError,
           RuntimeError)
"""What reading a damaged zip entry raises: a bad CRC or header, a broken deflate stream, a compression method or
encryption that svod never writes, text that is not JSON."""


def read_bundle(path: str | os.PathLike[str]) -> BundleFile:
    """Open, check and decode a bundle; any flaw is a ``BundleError`` naming the file and the flaw."""
    source = Path(path)

    def damaged(what: str) -> BundleError:
        return BundleError(f"plan bundle {source} is damaged: {what}", stage="load", value=str(source))

    def foreign(what: str) -> BundleError:
        return BundleError(f"{source} is not a svod plan bundle: {what}", stage="load", value=str(source))

    try:
        archive = zipfile.ZipFile(source)
    except FileNotFoundError as err:
        raise BundleError(f"no plan bundle at {source}", stage="load", value=str(source)) from err
    except (zipfile.BadZipFile, ValueError, EOFError, NotImplementedError) as err:
        raise foreign(f"not a zip archive ({err})") from err
    except OSError as err:
        raise BundleError(f"cannot read plan bundle {source}: {err}", stage="load", value=str(source)) from err
    with archive:
        names = set(archive.namelist())
        if MANIFEST not in names:
            raise foreign(f"it has no {MANIFEST}")
        try:
            manifest = json.loads(archive.read(MANIFEST))
        except _DAMAGE as err:
            raise damaged(f"{MANIFEST} cannot be read ({type(err).__name__}: {err})") from err
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            named = manifest.get("format") if isinstance(manifest, dict) else None
            raise foreign(f"its manifest names format {named!r}, not {FORMAT!r}")
        version = manifest.get("version")
        if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
            raise BundleError(f"plan bundle {source} has format version {version!r}; this svod reads versions up "
                              f"to {FORMAT_VERSION}", stage="load", value=version)
        blobs: dict[str, bytes] = {}
        try:
            graph_bytes = archive.read(GRAPH)
            listed = manifest.get("blobs")
            if not isinstance(listed, dict):
                raise damaged("its manifest lists no blobs")
            for digest, size in listed.items():
                data = archive.read(BLOBS + digest)
                if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
                    raise damaged(f"blob {digest[:16]} has {len(data)} bytes that do not match their sha256")
                blobs[digest] = data
        except KeyError as err:
            raise damaged(f"an entry is missing ({err})") from err
        except _DAMAGE as err:
            raise damaged(f"{type(err).__name__}: {err}") from err
    if hashlib.sha256(graph_bytes).hexdigest() != manifest.get("graph_sha256"):
        raise damaged(f"{GRAPH} does not match its sha256")
    try:
        graph = json.loads(graph_bytes)
    except ValueError as err:
        raise damaged(f"{GRAPH} is not JSON ({err})") from err
    return BundleFile(source, manifest, GraphReader(graph, blobs, source))


def require(condition: bool, path: Path, what: str) -> None:
    """A manifest field as the format says, or a ``BundleError`` naming the file."""
    if not condition:
        raise BundleError(f"plan bundle {path} is damaged: {what}", stage="load", value=str(path))


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def indices(values: Any, limit: int) -> bool:
    return isinstance(values, list) and all(is_count(v) and v < limit for v in values)


__all__ = ["FORMAT", "FORMAT_VERSION", "BundleFile", "GraphReader", "GraphWriter", "indices", "is_count",
           "read_bundle", "require", "write_bundle"]
