"""One colour per memory category, the same in every chart of every page (Tableau 10 hues, chosen to stay
apart for the common colour-vision deficiencies and to print in greyscale as distinct tones)."""

from __future__ import annotations

from collections.abc import Iterable

from memfit.estimate.category import Category

CATEGORY_COLOURS: dict[str, str] = {
    Category.WEIGHTS_FROZEN: "#4e79a7",
    Category.WEIGHTS_TRAINABLE: "#76b7b2",
    Category.GRADIENTS: "#f28e2b",
    Category.OPTIMIZER: "#e15759",
    Category.ACTIVATIONS: "#59a14f",
    Category.LOGITS: "#b07aa1",
    Category.TEMPORARIES: "#edc948",
    Category.INPUTS: "#9c755f",
    Category.UNTRACKED: "#bab0ac",
}
TOTAL_COLOUR = "#8c96a3"  # one series of totals (step moments without categories)
RESERVED_COLOUR = "#d5dbe1"  # allocator reserve + CUDA context beyond the allocated peak
CAPACITY_COLOUR = "#c62828"  # the GPU's memory (or the budget): a dashed line
ACCENT = "#4e79a7"  # single-series bars (tokens, per-layer bytes)
GOOD = "#2e7d32"
BAD = "#c62828"
SERIES: tuple[str, ...] = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948",
                           "#9c755f", "#ff9da7", "#bab0ac")
"""Colours for series that are not categories (sequence lengths in a sweep), in order."""

CATEGORY_ORDER: tuple[str, ...] = tuple(c.value for c in Category)


def colour(category: str) -> str:
    """The category's colour; an unknown category (a future one) gets a stable colour from its name."""
    if category in CATEGORY_COLOURS:
        return CATEGORY_COLOURS[category]
    if category == "total":
        return TOTAL_COLOUR
    return SERIES[sum(category.encode()) % len(SERIES)]


def label(category: str) -> str:
    """``weights_frozen`` -> ``weights (frozen)``: how a category reads in a legend."""
    if category.startswith("weights_"):
        return f"weights ({category.removeprefix('weights_')})"
    return category.replace("_", " ")


def ordered(categories: Iterable[str]) -> list[str]:
    """Categories in the canonical order (``Category``), unknown ones after, alphabetically.

    >>> ordered(["logits", "zeta", "weights_frozen"])
    ['weights_frozen', 'logits', 'zeta']
    """
    cats = set(categories)
    known = [c for c in CATEGORY_ORDER if c in cats]
    return known + sorted(cats - set(known))
