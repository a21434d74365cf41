"""How a figure and its 95 % interval read in tables: digits by unit and size (a bandwidth
of 0.07 Gbit/s keeps its digits, an interval never rounds to ±0.0), and words where no
interval exists (one sample) or where it covers one run's iterations only."""
from __future__ import annotations


def value_text(value: float, unit: str) -> str:
    """Seconds to 4 significant digits; anything below 10 to 3; larger values to one decimal."""
    if unit == "s":
        return format(value, ".4g")
    return format(value, ".3g") if abs(value) < 10 else format(value, ".1f")


def interval_text(ci95: float | None, unit: str, repetitions: int = 0, samples: int = 0) -> str:
    """'±1.2', '±0.0041 (1 run)' (an interval over one run's iterations, not across runs), or
    'n=1, no interval' (one sample: nothing to estimate a spread from)."""
    if ci95 is None:
        return "n=1, no interval" if samples <= 1 else "no interval"
    if ci95 == 0:
        text = "±0 (identical samples)"
    else:
        text = "±" + value_text(ci95, unit)
        if float(text[1:]) == 0:
            text = "±" + format(ci95, ".2g")
    return text + (" (1 run)" if repetitions == 1 else "")
