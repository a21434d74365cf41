"""Emulated links: the `emu-eth-<rate>` fabric names and link rates (1gbit, 500mbit, 2.5g)
a run asks for, and the rate it gets."""

from __future__ import annotations

import re

from launch import shapes
from launch.errors import UsageError
from launch.shapes import LinkRate
from containers.fabrics import is_emulated

_FABRIC = re.compile(r"^emu-eth-(\d{1,15}(?:\.\d{1,9})?[kmgt](?:bit)?)$", re.IGNORECASE | re.ASCII)


def parse_rate(text: object, field: str = "link rate") -> LinkRate:
    """'1gbit', '1g', '500mbit', '2.5gbit/s' -> bits per second, the shape tc's argv takes
    (launch.shapes.link_rate: refused in one line naming `field` where it is none)."""
    return shapes.link_rate(field, text)


def fabric_rate_bit_s(fabric: str) -> LinkRate:
    """The link rate an emulated fabric name carries: emu-eth-10g -> 10e9."""
    match = _FABRIC.match(fabric)
    if not match:
        raise UsageError(
            f"unknown emulated fabric {fabric[:40]!r}{'...' if len(fabric) > 40 else ''}; write emu-eth-<rate>, "
            "e.g. emu-eth-1g, emu-eth-10g",
            fields=("fabric",),
        )
    return parse_rate(match.group(1), "--fabric")


def run_rate_bit_s(spec) -> LinkRate | None:
    """The shaped rate of an emulated run (None: unshaped veth) from --link-rate or the fabric name."""
    rate = parse_rate(spec.link_rate, "--link-rate") if spec.link_rate else None
    if is_emulated(spec.fabric):
        if not spec.emulated:
            raise UsageError(
                f"fabric {spec.fabric} is emulated: use --launcher emulated", fields=("fabric", "launcher")
            )
        named = fabric_rate_bit_s(spec.fabric)
        if rate is not None and rate != named:
            raise UsageError(
                f"--link-rate {spec.link_rate} contradicts fabric {spec.fabric}", fields=("link_rate", "fabric")
            )
        rate = named
    elif spec.link_rate and not spec.emulated:
        raise UsageError("--link-rate applies to --launcher emulated only", fields=("link_rate", "launcher"))
    return rate


def link_rate_gbit_s(spec) -> float | None:
    if not spec.emulated:
        return None
    rate = run_rate_bit_s(spec)
    return None if rate is None else rate / 1e9
