"""A tar.gz's headers, walked and bounded before `tarfile` sees them.

`tarfile` trusts what a header declares: a pax header that declares 700 MiB is read into memory
whole (a 0.7 MB gzip of zeros can declare it), and some Pythons parse a long pax record in
quadratic time (CVE-2024-6232: fixed in 3.11.10 and 3.12.6, not in every interpreter a site
runs). So every reader of an archive calls `scan` first, which decompresses the stream in
bounded pieces, never holding more than one piece, and reads only the 512-byte headers:

  - at most 2 headers per member the limits allow (a member and its pax header), plus 2;
  - a pax, GNU long-name or global header at most EXTENDED_MAX_BYTES, each of its records of
    the strict form `LENGTH key=value\\n` (LENGTH at most 7 digits, and exact);
  - a member within limits.member_bytes, the data in all within limits.total_bytes;
  - no sparse member (its map is another header format), nothing after the end marker but
    zeros, and nothing that is not a whole header.

It refuses in one line (UsageError) and says nothing about members' names or kinds: that is
launch.provenance.archive.read's job, once this has passed.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from launch.errors import UsageError
from launch.trust import ArchiveLimits

BLOCK = 512
EXTENDED_MAX_BYTES = 16 * 1024  # a pax header of a long name is ~100 bytes
EXTENDED = {b"x", b"g", b"L", b"K"}  # pax, global pax, GNU long name, GNU long link
PIECE = 1 << 20  # the most decompressed bytes held at once
RECORD_LENGTH_DIGITS = 7


def _size(header: bytes, where: str) -> int:
    field = header[124:136]
    if field[0] & 0x80:  # GNU base-256
        return int.from_bytes(field[1:], "big")
    digits = field.replace(b"\0", b" ").strip()
    if not digits:
        return 0
    if len(digits) > 12 or not all(48 <= c <= 55 for c in digits):
        raise UsageError(f"{where}: a tar header's size is not an octal number: refused")
    return int(digits, 8)


def _check_records(data: bytes, where: str) -> None:
    """Every pax record is `LENGTH key=value\\n`, LENGTH its exact byte count, at most 7 digits."""
    at = 0
    while at < len(data):
        if data[at:].strip(b"\0") == b"":
            return
        space = data.find(b" ", at, at + RECORD_LENGTH_DIGITS + 1)
        digits = data[at:space] if space > at else b""
        if not digits or not digits.isdigit():
            raise UsageError(f"{where}: a pax record's length is not 1..{RECORD_LENGTH_DIGITS} digits: refused")
        length = int(digits)
        record = data[at : at + length]
        if length <= len(digits) + 1 or len(record) != length or not record.endswith(b"\n") or b"=" not in record:
            raise UsageError(f"{where}: a pax record is not `LENGTH key=value` of its length: refused")
        at += length


def _pieces(path: Path, where: str):
    """The decompressed stream, PIECE bytes at most at a time (one gzip member and its trailer)."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with open(path, "rb") as raw:
        while not inflate.eof:
            pending = raw.read(1 << 16)
            if not pending:
                raise UsageError(f"{where} is corrupt or truncated: the gzip stream does not end")
            while pending and not inflate.eof:
                try:
                    piece = inflate.decompress(pending, PIECE)
                except zlib.error as exc:
                    raise UsageError(f"{where} is corrupt or truncated: {exc}") from None
                pending = inflate.unconsumed_tail
                if piece:
                    yield piece


def scan(path: Path, limits: ArchiveLimits, where: str = "") -> None:
    """Walk `path`'s tar headers within `limits` (see the module); UsageError if not."""
    where = where or f"archive {path}"
    most_headers = 2 * limits.members + 2
    buffer = bytearray()
    headers = total = 0
    skip = 0  # data bytes of the current member still to pass
    extended = -1  # bytes of an extended header still to collect (-1: none)
    collected = bytearray()
    ended = False
    for piece in _pieces(path, where):
        buffer += piece
        while True:
            if skip:
                passed = min(skip, len(buffer))
                del buffer[:passed]
                skip -= passed
                if skip:
                    break
            if extended >= 0:
                wanted = extended - len(collected)
                collected += buffer[:wanted]
                del buffer[:wanted]
                if len(collected) < extended:
                    break
                _check_records(bytes(collected), where)
                padding = -extended % BLOCK
                extended, skip = -1, padding
                collected.clear()
                continue
            if len(buffer) < BLOCK:
                break
            header = bytes(buffer[:BLOCK])
            del buffer[:BLOCK]
            if ended:
                if header.strip(b"\0"):
                    raise UsageError(f"{where}: data after the tar's end marker: refused")
                continue
            if not header.strip(b"\0"):
                ended = True
                continue
            headers += 1
            if headers > most_headers:
                raise UsageError(f"{where} has more than {limits.members} members; refused")
            kind, size = header[156:157], _size(header, where)
            if kind in EXTENDED:
                if size > EXTENDED_MAX_BYTES:
                    raise UsageError(
                        f"{where}: a pax or long-name header declares {size} bytes, over {EXTENDED_MAX_BYTES}: refused"
                    )
                extended = size
                continue
            if kind == b"S":
                raise UsageError(f"{where}: a sparse member: refused")
            if size > limits.member_bytes:
                raise UsageError(
                    f"{where}: a member unpacks to {size} bytes, over the {limits.member_bytes // 2**20} MiB limit; refused"
                )
            total += size
            if total > limits.total_bytes:
                raise UsageError(f"{where} unpacks to more than {limits.total_bytes // 2**20} MiB; refused")
            skip = size + (-size % BLOCK)
    if skip or extended >= 0 or (buffer and bytes(buffer).strip(b"\0")):
        raise UsageError(f"{where} is corrupt or truncated: a member's data does not end")
