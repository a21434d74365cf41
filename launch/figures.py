"""How a figure and its 95 % interval read in tables: digits by unit and size (a bandwidth
of 0.07 Gbit/s keeps its digits, an interval never rounds to ±0.0), and words where no
interval exists (one sample) or where it covers one run's iterations only."""

from __future__ import annotations


def value_text(value: float, unit: str) -> str:
    """Seconds to 4 significant digits; values below 1 (a bandwidth of 0.07 Gbit/s) to 3; others
    to one decimal."""
    if unit == "s":
        return format(value, ".4g")
    return format(value, ".3g") if abs(value) < 1 else format(value, ".1f")


def interval_text(ci95: float | None, unit: str, repetitions: int = 0, samples: int = 0) -> str:
    """'±1.2', '±0.0041 (1 run)' (an interval over one run's iterations, not across runs), or
    'n=1, no interval' (one sample: nothing to estimate a spread from)."""
    if ci95 is None:
        return "n=1, no interval" if samples <= 1 else "no interval"
    if ci95 == 0:
        text = "±0 (identical samples)"
    else:  # the mean's decimals, or two significant digits where those would read 0
        text = "±" + (format(ci95, ".4g") if unit == "s" else format(ci95, ".1f"))
        if float(text[1:]) == 0:
            text = "±" + format(ci95, ".2g")
    return text + (" (1 run)" if repetitions == 1 else "")
