"""The one domain error. The CLI catches it once and prints one red line, exit code 1 (under ``--json``: one
JSON object ``{"error", "hint", "exit_code"}`` on stdout)."""

from __future__ import annotations

import re

__all__ = ["MemfitError", "require_extra", "split_hint"]

# What a fix starts with: the imperative verbs memfit's messages name the fix with (after ": " or "; ").
_FIX_START = re.compile(
    r"(?:pass|use|add|drop|give|choose|raise|lower|create|install|pip install|run|set|remove|name|rename|try|"
    r"see|write|end|fix|check|make|put|shorten|increase|reduce|ask|delete|keep|move|call|open|copy|select|"
    r"replace|list|either|convert|upgrade|save|specify|load|read|train|quote|leave|point|split|lengthen|"
    r"shrink|change|free|wait|start|restart|edit|correct|enable|disable|type|include|spell|omit|"
    r"did you mean|for example)\b|e\.g\.",
    re.IGNORECASE,
)


def split_hint(message: str) -> tuple[str, str | None]:
    """``(error, hint)`` of a one-line message that names its fix after ``": "`` or ``"; "``: the last such
    separator followed by an imperative (``pass ...``, ``use ...``, ``raise --seq-len ...``); ``(message,
    None)`` when the message names no fix that way.

    >>> split_hint("example 3 has 3,104 tokens, more than --seq-len 2048: raise --seq-len or pass --overflow split")
    ('example 3 has 3,104 tokens, more than --seq-len 2048', 'raise --seq-len or pass --overflow split')
    >>> split_hint("no such file or directory: data.jsonl")
    ('no such file or directory: data.jsonl', None)
    """
    best: tuple[str, str] | None = None
    for m in re.finditer(r"[:;] ", message):
        tail = message[m.end():]
        if _FIX_START.match(tail):
            best = (message[:m.start()].rstrip(), tail.strip())
    return best if best is not None else (message, None)


class MemfitError(Exception):
    """A problem with the user's input or environment, phrased as what to do about it.

    ``MemfitError("the folder out/ does not exist", hint="create it or choose another --out")`` keeps the two
    apart (``str()`` joins them with ``": "``); a message given whole is split by :func:`split_hint`.
    """

    def __init__(self, message: str = "", *, hint: str | None = None) -> None:
        super().__init__(f"{message}: {hint}" if hint else message)
        self._error = message
        self._hint = hint

    @property
    def error(self) -> str:
        """What went wrong (the message without its fix)."""
        return self._error if self._hint else split_hint(str(self))[0]

    @property
    def hint(self) -> str | None:
        """What to do about it, or None when the message names no fix apart."""
        return self._hint if self._hint else split_hint(str(self))[1]


def require_extra(module: str, extra: str) -> None:
    """Raise a MemfitError naming the extra to install when ``module`` cannot be imported.

    >>> require_extra("json", "torch")  # present: nothing happens
    """
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MemfitError(f"this needs {module}", hint=f"pip install 'memfit[{extra}]'")
