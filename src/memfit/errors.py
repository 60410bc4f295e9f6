"""The one domain error. The CLI catches it once and prints one red line, exit code 1."""

from __future__ import annotations


class MemfitError(Exception):
    """A problem with the user's input or environment, phrased as what to do about it."""


def require_extra(module: str, extra: str) -> None:
    """Raise a MemfitError naming the extra to install when ``module`` cannot be imported.

    >>> require_extra("json", "torch")  # present: nothing happens
    """
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MemfitError(f"this needs {module}: pip install 'memfit[{extra}]'")
