"""Options the data commands (``lengths``, ``pack``, ``verify-pack``) share: the EOS rule."""

from __future__ import annotations

from typing import Annotated

import typer

from memfit.errors import MemfitError

__all__ = ["EosOpt", "NoEosOpt", "eos_choice"]

EosOpt = Annotated[str | None, typer.Option("--eos", help="the token to end each text / prompt-completion example "
                                            "with (default: the tokenizer's own rule; the report says which)")]
NoEosOpt = Annotated[bool, typer.Option("--no-eos", help="end text / prompt-completion examples with no EOS")]


def eos_choice(eos: str | None, no_eos: bool) -> str | bool | None:
    """``load_tokenizer``'s ``eos=`` from the two flags: a token, ``False`` (``--no-eos``) or ``None`` (the rule)."""
    if no_eos and eos is not None:
        raise MemfitError(f"--eos {eos!r} and --no-eos contradict each other: give one")
    if no_eos:
        return False
    if eos is not None and not eos:
        raise MemfitError("--eos needs a token, e.g. --eos '<|endoftext|>' (or pass --no-eos)")
    return eos
