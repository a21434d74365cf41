"""Symbol versions of an ELF shared object, read in pure Python (no readelf needed).

`defined(data)`: the versions a library provides (.gnu.version_d: `FABRIC_1.6`, ...);
`needed(data)`: per library file, the versions a program or plugin requires
(.gnu.version_r: {"libfabric.so.1": {"FABRIC_1.0", "FABRIC_1.7"}}). The loader
refuses a library lacking a needed version ("version `FABRIC_1.7' not found
(required by libnccl-net.so)"); comparing the two sets before launch says so first.
"""

from __future__ import annotations

import re
import struct

SHT_DYNSYM, SHT_GNU_VERDEF, SHT_GNU_VERNEED = 11, 0x6FFFFFFD, 0x6FFFFFFE
SHT_DYNAMIC, DT_SONAME = 6, 14


class NotElf(ValueError):
    pass


def _sections(data: bytes):
    if data[:4] != b"\x7fELF":
        raise NotElf("not an ELF file")
    is64, little = data[4] == 2, data[5] == 1
    end = "<" if little else ">"
    if is64:
        (shoff,) = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        layout = end + "IIQQQQIIQQ"
    else:
        (shoff,) = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        layout = end + "IIIIIIIIII"
    sections = []
    for i in range(shnum):
        (_name, kind, _flags, _addr, offset, size, link, info, _align, entsize) = struct.unpack_from(
            layout, data, shoff + i * shentsize
        )
        sections.append({"type": kind, "offset": offset, "size": size, "link": link, "info": info, "entsize": entsize})
    return sections, end, is64


def _string(data: bytes, table: dict, offset: int) -> str:
    start = table["offset"] + offset
    return data[start : data.index(b"\0", start)].decode("ascii", "replace")


def defined(data: bytes) -> set[str]:
    """Versions this library defines (its own soname's base entry left out)."""
    sections, end, _ = _sections(data)
    names: set[str] = set()
    for sec in (s for s in sections if s["type"] == SHT_GNU_VERDEF):
        strtab, at = sections[sec["link"]], sec["offset"]
        for _ in range(sec["info"]):
            _ver, flags, _ndx, cnt, _hash, aux, nxt = struct.unpack_from(end + "HHHHIII", data, at)
            if cnt and not flags & 0x1:  # VER_FLG_BASE: the soname itself
                (name_off,) = struct.unpack_from(end + "I", data, at + aux)
                names.add(_string(data, strtab, name_off))
            if not nxt:
                break
            at += nxt
    return names


def needed(data: bytes) -> dict[str, set[str]]:
    """Library file -> versions required from it."""
    sections, end, _ = _sections(data)
    out: dict[str, set[str]] = {}
    for sec in (s for s in sections if s["type"] == SHT_GNU_VERNEED):
        strtab, at = sections[sec["link"]], sec["offset"]
        for _ in range(sec["info"]):
            _ver, cnt, file_off, aux, nxt = struct.unpack_from(end + "HHIII", data, at)
            versions = out.setdefault(_string(data, strtab, file_off), set())
            aux_at = at + aux
            for _ in range(cnt):
                _hash, _flags, _other, name_off, aux_next = struct.unpack_from(end + "IHHII", data, aux_at)
                versions.add(_string(data, strtab, name_off))
                if not aux_next:
                    break
                aux_at += aux_next
            if not nxt:
                break
            at += nxt
    return out


def soname(data: bytes) -> str | None:
    sections, end, is64 = _sections(data)
    for sec in (s for s in sections if s["type"] == SHT_DYNAMIC):
        strtab, size = sections[sec["link"]], 16 if is64 else 8
        for at in range(sec["offset"], sec["offset"] + sec["size"], size):
            tag, value = struct.unpack_from(end + ("qQ" if is64 else "iI"), data, at)
            if tag == DT_SONAME:
                return _string(data, strtab, value)
            if tag == 0:
                break
    return None


def version_key(name: str) -> tuple[int, ...]:
    """FABRIC_1.10 sorts after FABRIC_1.9."""
    return tuple(int(n) for n in re.findall(r"\d+", name))


def missing_versions(provider: bytes, consumer: bytes, library: str) -> tuple[set[str], set[str]]:
    """(versions the consumer needs from `library` that the provider lacks, provider's versions)."""
    have = defined(provider)
    want = needed(consumer).get(library, set())
    return want - have, have
