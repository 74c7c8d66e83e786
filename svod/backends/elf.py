"""Checks on ELF files before a loader trusts them: the format and machine are this host's, every section
and segment lies inside the bytes, and the symbol a kernel is looked up by is defined.

Compiled code reaches a loader from the disk cache, where another writer (another version, a truncated
write that still checksums) may have put bytes that are not this compiler's object. Handing such bytes to
LLVM's linker or to the dynamic loader can crash the process; a ``SvodError`` instead makes the cache
rebuild the entry.
"""

from __future__ import annotations

import platform
import struct
from dataclasses import dataclass

from svod.errors import SvodError

ET_REL, ET_DYN = 1, 3
"""A relocatable object (what LLVM emits) and a shared object (what the C compiler builds)."""
_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}
_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SEGMENT = struct.Struct("<IIQQQQQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_SHT_SYMTAB, _SHT_NOBITS, _SHT_DYNSYM = 2, 8, 11


@dataclass(frozen=True, slots=True)
class ElfFile:
    kind: int
    symbols: frozenset[str]
    """The names of the symbols the file defines."""


def read_elf(data: bytes, kind: int, *, kernel: str) -> ElfFile:
    """``data`` as an ELF file of ``kind`` for this machine, or a ``SvodError`` saying what is wrong."""
    def bad(what: str) -> SvodError:
        return SvodError(f"the compiled code is not a loadable object for this machine: {what}", kernel=kernel,
                         stage="load")

    if len(data) < _HEADER.size or data[:4] != b"\x7fELF":
        raise bad("no ELF header")
    ident, e_type, machine, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _ = _HEADER.unpack_from(data)
    if ident[4] != 2 or ident[5] != 1:
        raise bad("not a 64-bit little-endian ELF file")
    if e_type != kind:
        raise bad(f"ELF type {e_type}, expected {kind}")
    expected = _MACHINES.get(platform.machine().lower())
    if expected is not None and machine != expected:
        raise bad(f"built for machine {machine}, this one is {expected}")
    if shentsize != _SECTION.size or shoff + shnum * shentsize > len(data):
        raise bad("the section table lies outside the file")
    if phnum and (phentsize != _SEGMENT.size or phoff + phnum * phentsize > len(data)):
        raise bad("the segment table lies outside the file")
    sections = [_SECTION.unpack_from(data, shoff + k * shentsize) for k in range(shnum)]
    for _, sh_type, _, _, offset, size, *_ in sections:
        if sh_type != _SHT_NOBITS and offset + size > len(data):
            raise bad("a section lies outside the file")
    for k in range(phnum):
        _, _, offset, _, _, filesz, _, _ = _SEGMENT.unpack_from(data, phoff + k * phentsize)
        if offset + filesz > len(data):
            raise bad("a segment lies outside the file")
    return ElfFile(e_type, frozenset(_defined_symbols(data, sections, bad)))


def _defined_symbols(data: bytes, sections: list[tuple[int, ...]], bad: object) -> list[str]:
    names = []
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type not in (_SHT_SYMTAB, _SHT_DYNSYM) or entsize != _SYMBOL.size or link >= len(sections):
            continue
        strings_at, strings_size = sections[link][4], sections[link][5]
        for position in range(offset, offset + size - _SYMBOL.size + 1, _SYMBOL.size):
            name_at, _, _, section_index, _, _ = _SYMBOL.unpack_from(data, position)
            if section_index == 0 or name_at >= strings_size:
                continue
            end = data.find(b"\0", strings_at + name_at, strings_at + strings_size)
            if end < 0:
                raise bad("a symbol name runs past its string table")  # type: ignore[operator]
            names.append(data[strings_at + name_at:end].decode(errors="replace"))
    return names
