"""Tables that stay readable in a narrow terminal: wrapped or fewer columns, never a value cut with an ellipsis.

rich shrinks a table wider than the terminal by wrapping at spaces and, where a word is longer than its
column, cutting it with "…" (``overflow="ellipsis"``, the default): "llama-3.1-8b" became "llama-…" at 80
columns. :func:`narrow` decides the layout before rich does: the columns a user needs whole (a model name, the
flags of a fit step) never wrap and never shrink below their widest value; every other column folds a long
word onto the next line instead of cutting it; and when even that cannot fit, the columns named in ``drop``
are taken out, in that order, and handed back so the caller can print them under the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

__all__ = ["FOLD_AT", "dropped_note", "narrow", "plain", "split_columns"]

FOLD_AT = 16  # a word longer than this in a prose column (a path, a JSON value) folds rather than widen it
PROSE_MIN = 8  # the narrowest a prose column gets before a name or a figure is folded


def plain(cell: Any) -> str:
    """The text of a cell as shown (markup removed)."""
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        try:
            return Text.from_markup(cell).plain
        except Exception:  # not valid markup: shown as it is
            return cell
    return str(cell)


def _widest(texts: Iterable[str]) -> int:
    return max((len(line) for t in texts for line in t.splitlines() or [""]), default=0)


def _longest_word(texts: Iterable[str]) -> int:
    return max((len(w) for t in texts for w in t.split()), default=0)


def narrow(table: Table, *, keep: Iterable[str], drop: Sequence[str] = (), width: int | None = None
           ) -> list[tuple[str, list[str]]]:
    """Lay ``table`` out for ``width`` terminal columns (the console's by default) with no ellipsis (module
    docstring). ``keep`` and ``drop`` name columns by header (a name not in the table is ignored); figures
    (right-justified columns) are kept whole too. Returns the columns taken out, ``(header, cells as text)``,
    in the order they were dropped.

    When the table is wider than ``width``, every column gets a fixed width: first its least (the widest
    value of a kept column, the longest word of another up to :data:`FOLD_AT`), then what is left goes to the
    columns that want the least more, up to their widest value, so short columns stay on one line and long
    prose wraps. If the leasts alone overrun ``width``, columns give way and fold (prose columns first, down
    to :data:`PROSE_MIN`). rich's own shrinking cuts words with "…", and a minimum width alone lets it overrun
    the terminal.
    """
    if width is None:
        from memfit.report.consoles import console

        width = console.width
    kept = set(keep)
    edges = 2 if table.show_edge else 0

    def whole(col: Any) -> bool:  # never wrapped: the columns named, and figures (right-justified columns)
        return col.header in kept or col.justify == "right"

    def ranges() -> list[tuple[int, int]]:  # (least, most) content width of each column
        out = []
        for col in table.columns:
            texts = [plain(c) for c in col._cells]
            head = plain(col.header)
            most = max(_widest(texts), _widest([head]), 1)
            if col.max_width is not None:
                most = min(most, col.max_width)
            least = _widest(texts) if whole(col) else min(_longest_word(texts), FOLD_AT)
            out.append((max(least, min(_longest_word([head]), FOLD_AT), 1), most))
        return out

    def frame() -> int:  # padding (0, 1) of each column, the rules between them and the edges
        return 2 * len(table.columns) + max(len(table.columns) - 1, 0) + edges

    dropped: list[tuple[str, list[str]]] = []
    for name in drop:
        if sum(least for least, _ in ranges()) + frame() <= width:
            break
        for i, col in enumerate(table.columns):
            if col.header == name:
                dropped.append((str(name), [plain(c) for c in col._cells]))
                del table.columns[i]
                break
    spans = ranges()
    for col in table.columns:
        col.overflow = "fold"  # a word longer than its column goes on to the next line, never "…"
    if sum(most for _, most in spans) + frame() > width:
        sizes = [least for least, _ in spans]
        over = sum(sizes) + frame() - width
        # last resort, rather than overrun or cut: prose columns fold down to PROSE_MIN, then whole ones (widest
        # first) down to FOLD_AT
        for floor, which in ((PROSE_MIN, lambda c: not whole(c)), (FOLD_AT, whole)):
            while over > 0:
                cands = [i for i, c in enumerate(table.columns) if which(c) and sizes[i] > floor]
                if not cands:
                    break
                i = max(cands, key=lambda i: sizes[i])
                cut = min(over, sizes[i] - floor)
                sizes[i] -= cut
                over -= cut
        room = width - frame() - sum(sizes)
        for i in sorted(range(len(spans)), key=lambda i: spans[i][1] - spans[i][0]):
            grant = max(0, min(room, spans[i][1] - sizes[i]))
            sizes[i] += grant
            room -= grant
        for col, size, (least, _) in zip(table.columns, sizes, spans, strict=True):
            col.width = size
            col.no_wrap = whole(col) and size >= least
    return dropped


def dropped_note(dropped: list[tuple[str, list[str]]], what: str = "") -> str | None:
    """One line naming the columns :func:`narrow` left out, or None."""
    if not dropped:
        return None
    names = ", ".join(h for h, _ in dropped)
    return f"({names} left out at this terminal width{what}; widen it, or see --json)"


def split_columns(table: Table, *, fixed: int = 1, width: int | None = None) -> list[Table]:
    """``table`` as several tables when it is too wide, each with the first ``fixed`` columns and as many of the
    others as fit (for tables with one column per measured point); ``[table]`` when it fits."""
    if width is None:
        from memfit.report.consoles import console

        width = console.width

    def size(cols: list[Any]) -> int:
        return sum(max(_widest(plain(c) for c in col._cells), _widest([plain(col.header)]), 1) + 3
                   for col in cols) + 1

    head, rest = table.columns[:fixed], table.columns[fixed:]
    if size(table.columns) <= width or not rest:
        narrow(table, keep=[c.header for c in head])
        return [table]
    groups: list[list[Any]] = [[]]
    for col in rest:
        if groups[-1] and size(head + groups[-1] + [col]) > width:
            groups.append([])
        groups[-1].append(col)
    out = []
    for i, group in enumerate(groups):
        t = Table(title=f"{table.title} ({i + 1}/{len(groups)})" if table.title else None,
                  title_justify=table.title_justify, box=table.box)
        for col in head + group:
            t.add_column(col.header, justify=col.justify, no_wrap=True)
        for r in range(table.row_count):
            t.add_row(*[col._cells[r] for col in head + group])
        narrow(t, keep=[c.header for c in head])
        out.append(t)
    return out
