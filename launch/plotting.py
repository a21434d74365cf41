"""Where every figure the bundle draws is made: matplotlib without a display (Agg) and with
`text.parse_math` off. The words on a figure (fabric, model, site and run names, titles) may come
from another site's result, and to mathtext "$\\foo$" is a command to parse (an unknown one ends
the command with a traceback, issue 64 C-13); here it is text, drawn as written. A character no
font has is drawn as a box without matplotlib's warning, which would echo it to the terminal as it
is (an escape byte among them).

Modules that draw import this one instead of matplotlib.pyplot, and make figures with its
`subplots` (`close` when done); tests/test_architecture.py checks that no other module imports
pyplot, selects a backend, sets rcParams or constructs a Figure itself. Imported where a figure is
drawn: the CLI starts without matplotlib."""

from __future__ import annotations

import functools
import warnings
from typing import Callable, ParamSpec, TypeVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

_MISSING_GLYPH = r"Glyph \d+ \([\s\S]*\) missing from font"
P = ParamSpec("P")
R = TypeVar("R")


def _words_are_text(make: Callable[P, R]) -> Callable[P, R]:
    """`make`, called with math text off: every Text made from then on (titles, labels, legend
    and tick labels, drawn later too) reads `text.parse_math` from rcParams when it is made; and
    with no warning for a missing glyph when it is drawn."""

    @functools.wraps(make)
    def made(*args: P.args, **kwargs: P.kwargs) -> R:
        matplotlib.rcParams["text.parse_math"] = False
        warnings.filterwarnings("ignore", _MISSING_GLYPH, UserWarning)
        return make(*args, **kwargs)

    return made


subplots = _words_are_text(plt.subplots)
close = plt.close
