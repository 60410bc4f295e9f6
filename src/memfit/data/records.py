"""The record schema: which fields of a record hold the training text, and what a usable record is.

A record is one JSON object (a row of a CSV or Parquet file) as :mod:`memfit.data.formats` reads it. Its
training text is in exactly one layout, named by a :class:`FieldSpec`:

``text``
    one string field (every token carries the loss);
``prompt`` + ``completion``
    two string fields (only the completion carries the loss);
``messages``
    a chat, in the OpenAI layout (``[{"role": "user", "content": "..."}]``) or the ShareGPT layout
    (``[{"from": "human", "value": "..."}]``); :func:`normalise_messages` turns both into OpenAI
    ``role``/``content`` dicts with roles ``system``/``user``/``assistant``/``tool`` (:data:`ROLE_ALIASES`).

A record that cannot be used under the spec (a field missing or of the wrong type, an unknown chat role, a
chat with no assistant turn) is not an error: :func:`check_record` gives the reason, and the reader keeps it
as a :class:`Skipped` with its line number.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfit.errors import MemfitError

__all__ = [
    "PACKED_FIELDS",
    "ROLE_ALIASES",
    "FieldSpec",
    "Skipped",
    "check_record",
    "infer_fields",
    "normalise_messages",
    "tokenized_hint",
]

# ShareGPT "from" values (and OpenAI role aliases) -> OpenAI roles.
ROLE_ALIASES: dict[str, str] = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
    "ipython": "tool",
}

PACKED_FIELDS = frozenset({"position_ids", "seq_lens", "cu_seqlens", "example_ids"})  # memfit pack's extra fields


@dataclass(frozen=True, kw_only=True, slots=True)
class Skipped:
    """One record that was not analysed: where it is (1-based line or row) and why."""

    line: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "reason": self.reason}


@dataclass(frozen=True, kw_only=True, slots=True)
class FieldSpec:
    """Which fields of a record hold the training text: exactly one of text, prompt+completion, messages."""

    text: str | None = None
    prompt: str | None = None
    completion: str | None = None
    messages: str | None = None

    def __post_init__(self) -> None:
        modes = sum((self.text is not None, self.prompt is not None or self.completion is not None,
                     self.messages is not None))
        if modes > 1:
            raise MemfitError("give one of --text, --prompt/--completion or --messages, not several")
        if (self.prompt is None) != (self.completion is None):
            raise MemfitError("--prompt and --completion go together: give both")

    @property
    def mode(self) -> str:
        """``"text"``, ``"prompt_completion"``, ``"messages"``, or ``"none"`` when no field is named."""
        if self.text is not None:
            return "text"
        if self.prompt is not None:
            return "prompt_completion"
        if self.messages is not None:
            return "messages"
        return "none"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.text, self.prompt, self.completion, self.messages) if n is not None)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "prompt": self.prompt, "completion": self.completion,
                "messages": self.messages}


def infer_fields(fields: list[str], *, path: str | Path = "data") -> FieldSpec:
    """Guess the field spec from the fields present: ``messages``/``conversations`` (chat), then
    ``prompt``+``completion``, then ``text``. Anything else must be named.

    >>> infer_fields(["id", "conversations"]).messages
    'conversations'
    >>> infer_fields(["prompt", "completion"]).mode
    'prompt_completion'
    """
    for name in ("messages", "conversations"):
        if name in fields:
            return FieldSpec(messages=name)
    if "prompt" in fields and "completion" in fields:
        return FieldSpec(prompt="prompt", completion="completion")
    if "text" in fields:
        return FieldSpec(text="text")
    hint = tokenized_hint(fields)
    if hint:
        raise MemfitError(f"{path} holds no text to tokenise (fields: {', '.join(fields)})" + hint)
    raise MemfitError(f"cannot tell which fields of {path} to tokenise (fields: {', '.join(fields)}): "
                      "pass --text FIELD, --prompt FIELD --completion FIELD, or --messages FIELD")


def tokenized_hint(fields: list[str]) -> str:
    """A hint when the records are already token ids (``memfit pack`` output, or a tokenized data set);
    ``""`` otherwise."""
    names = set(fields)
    if "input_ids" not in names:
        return ""
    if names & PACKED_FIELDS:
        return (": it looks like the output of memfit pack (packed rows of token ids). memfit lengths, pack and "
                "verify-pack read the source records (text, prompt/completion or a chat) and tokenise and pack "
                "them themselves: pass the file you packed, not the packed rows")
    return (": its records are already token ids (input_ids); memfit reads the text and tokenises it with "
            "--tokenizer: pass the records before tokenisation")


def normalise_messages(value: Any) -> list[dict[str, str]]:
    """A chat in the OpenAI (``role``/``content``) or ShareGPT (``from``/``value``) layout as OpenAI dicts.

    Raises ``ValueError`` with the reason when the value is not a chat.

    >>> normalise_messages([{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}])
    [{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'hello'}]
    """
    if not isinstance(value, list) or not value:
        raise ValueError("messages is not a non-empty list")
    out = []
    for i, msg in enumerate(value):
        if not isinstance(msg, dict):
            raise ValueError(f"message {i} is not an object")
        if "role" in msg:
            role, content = msg.get("role"), msg.get("content")
        elif "from" in msg:
            role, content = msg.get("from"), msg.get("value")
        else:
            raise ValueError(f"message {i} has neither role/content nor from/value")
        if not isinstance(role, str) or role.lower() not in ROLE_ALIASES:
            raise ValueError(f"message {i} has an unknown role {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"message {i} has no text content")
        out.append({"role": ROLE_ALIASES[role.lower()], "content": content})
    if not any(m["role"] == "assistant" for m in out):
        raise ValueError("chat has no assistant turn")
    return out


def check_record(row: dict[str, Any], spec: FieldSpec) -> str | None:
    """The reason ``row`` cannot be used under ``spec``, or None when it can.

    >>> check_record({"q": "hi", "a": 3}, FieldSpec(prompt="q", completion="a"))
    "field 'a' is int, not text"
    """
    for name in spec.names:
        if name not in row:
            return f"no field {name!r} (this record has: {', '.join(map(str, row)) or 'nothing'})"
        value = row[name]
        if name == spec.messages:
            try:
                normalise_messages(value)
            except ValueError as exc:
                return f"field {name!r}: {exc}"
        elif not isinstance(value, str):
            return f"field {name!r} is {type(value).__name__}, not text"
    return None
