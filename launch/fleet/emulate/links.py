"""Emulated links: the `emu-eth-<rate>` fabric names and link rates (1gbit, 500mbit, 2.5g)
a run asks for, and the rate it gets."""

from __future__ import annotations

import re

from launch.errors import UsageError
from containers.fabrics import is_emulated

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt])(?:bit)?(?:/s)?\s*$", re.IGNORECASE)


_UNIT = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


_FABRIC = re.compile(r"^emu-eth-(\d+(?:\.\d+)?[kmgt](?:bit)?)$", re.IGNORECASE)


def parse_rate(text: str) -> int:
    """'1gbit', '1g', '500mbit', '2.5gbit/s' -> bits per second."""
    match = _RATE.match(text or "")
    if not match or float(match.group(1)) <= 0:
        raise UsageError(f"unknown link rate {text!r}; write e.g. 1gbit, 500mbit, 2.5g")
    return int(float(match.group(1)) * _UNIT[match.group(2).lower()])


def fabric_rate_bit_s(fabric: str) -> int:
    """The link rate an emulated fabric name carries: emu-eth-10g -> 10e9."""
    match = _FABRIC.match(fabric)
    if not match:
        raise UsageError(
            f"unknown emulated fabric {fabric!r}; write emu-eth-<rate>, e.g. emu-eth-1g, emu-eth-10g",
            fields=("fabric",),
        )
    return parse_rate(match.group(1))


def run_rate_bit_s(spec) -> int | None:
    """The shaped rate of an emulated run (None: unshaped veth) from --link-rate or the fabric name."""
    rate = parse_rate(spec.link_rate) if spec.link_rate else None
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
