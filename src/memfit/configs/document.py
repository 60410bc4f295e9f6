"""Reading one config file into a plain mapping, keeping the line (and the text span) of every key.

YAML is read with PyYAML's safe loader only (``yaml.safe_load`` for the values, ``yaml.compose`` with the
``SafeLoader`` for the node marks): no tags that build objects, no code. JSON values come from ``json``
(so ``1e-4`` is a float as JSON says), with the lines taken from the same YAML node tree where PyYAML can
read the text. Pickles (a Trainer's ``training_args.bin``) are refused: unpickling runs code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from memfit.errors import MemfitError

KeyPath = tuple[str, ...]
MAX_BYTES = 4 * 1024 * 1024  # a training config is a few KiB; refuse anything that is clearly not one


@dataclass(frozen=True, kw_only=True, slots=True)
class Span:
    """Where a key's value sits in the text: character offsets of the value node and the key's line/column."""

    start: int
    end: int
    key_line: int  # 1-based
    key_column: int  # 0-based
    scalar: bool
    block: bool  # a block (indented) mapping or sequence, not a flow one ({...}, [...])


@dataclass(frozen=True, kw_only=True, slots=True)
class Document:
    """One file as read: its path, text, format, the mapping, and key path -> line / span."""

    path: Path
    text: str
    format: Literal["yaml", "json"]
    data: dict[str, Any]
    spans: dict[KeyPath, Span] = field(default_factory=dict)

    def line(self, path: KeyPath | str) -> int | None:
        key = (path,) if isinstance(path, str) else path
        span = self.spans.get(key)
        return span.key_line if span else None

    def where(self, path: KeyPath | str) -> str:
        """``run.yaml:12`` (or just the file name when the line is unknown)."""
        line = self.line(path)
        return f"{self.path}:{line}" if line else str(self.path)


def refuse_pickle(path: Path, head: bytes) -> None:
    """A Trainer's ``training_args.bin`` is ``torch.save(TrainingArguments)``: a pickle (a zip of pickles
    since torch 1.6). memfit never unpickles a user's file."""
    if path.suffix in (".bin", ".pt", ".pth", ".pkl", ".pickle") or head[:1] == b"\x80" or head[:2] == b"PK":
        raise MemfitError(
            f"{path} is a pickle (a Trainer's training_args.bin is torch.save(TrainingArguments)): memfit does not "
            "load pickles, they can run code. Pass the YAML/JSON you launched with, or write the arguments out "
            "as JSON in your script: open('training_args.json', 'w').write(args.to_json_string())")


def load_document(path: str | Path) -> Document:
    """Read ``path`` (YAML or JSON) into a :class:`Document`; one clear error for anything else."""
    p = Path(path)
    if not p.exists():
        raise MemfitError(f"no config file at {p}: check the path given to --config")
    if p.is_dir() and (p / "adapter_config.json").is_file():  # a saved PEFT adapter's folder
        p = p / "adapter_config.json"
    if p.is_dir():
        raise MemfitError(f"{p} is a directory: pass the config file itself to --config "
                          "(a PEFT adapter's folder works when it holds adapter_config.json)")
    try:
        raw = p.read_bytes()[: MAX_BYTES + 1]
    except OSError as exc:
        raise MemfitError(f"cannot read {p}: {exc.strerror or exc}") from exc
    refuse_pickle(p, raw[:4])
    if len(raw) > MAX_BYTES:
        raise MemfitError(f"{p} is larger than {MAX_BYTES // 1024**2} MiB: not a training config")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MemfitError(f"{p} is not UTF-8 text (byte {exc.start}): pass a YAML or JSON config") from exc
    fmt: Literal["yaml", "json"] = "json" if p.suffix.lower() == ".json" or text.lstrip().startswith("{") else "yaml"
    data = _parse(p, text, fmt)
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise MemfitError(f"{p} is {kind}, not a mapping of fields: a training config is key: value pairs")
    return Document(path=p, text=text, format=fmt, data=data, spans=_spans(text))


def _parse(p: Path, text: str, fmt: str) -> Any:
    import yaml

    if fmt == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise MemfitError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
        except RecursionError:
            raise MemfitError(f"{p} nests too deeply to be a training config") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise MemfitError(f"{where}: not valid YAML ({problem})") from exc
    except RecursionError:
        raise MemfitError(f"{p} nests too deeply to be a training config") from None


def _spans(text: str) -> dict[KeyPath, Span]:
    """Key path -> value span, from PyYAML's node tree (empty if PyYAML cannot read the text)."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):
        return {}
    out: dict[KeyPath, Span] = {}

    def walk(node: Any, prefix: KeyPath) -> None:
        if not isinstance(node, yaml.MappingNode):
            return
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue
            path = (*prefix, str(key.value))
            out[path] = Span(start=value.start_mark.index, end=value.end_mark.index,
                             key_line=key.start_mark.line + 1, key_column=key.start_mark.column,
                             scalar=isinstance(value, yaml.ScalarNode),
                             block=not bool(getattr(value, "flow_style", False)))
            if len(path) < 8:
                walk(value, path)

    walk(root, ())
    return out
