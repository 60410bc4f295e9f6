"""Readable at 80 columns: no command's table cuts a value with "…" (rich's default when a word is longer than
its column: "llama-3.1-8b" was "llama-…" in `memfit models`, "checkpointing none->full" was "checkp… none->…"
in `memfit fit`); a narrow terminal gets wrapped rows or fewer columns instead."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.table import Table

from memfit.report._width import narrow

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
NEOX = str(SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json")
AXOLOTL = str(Path(__file__).resolve().parents[1] / "configs" / "files" / "axolotl_qlora.yml")
TRL_DS = str(Path(__file__).resolve().parents[1] / "configs" / "files" / "trl_full_deepspeed.yaml")
Cli = Callable[[list[str]], tuple[int, str, str]]


@pytest.fixture
def eighty() -> Iterator[None]:
    from memfit.report import console, err_console

    old = console.width, err_console.width
    console.width = err_console.width = 80
    try:
        yield
    finally:
        console.width, err_console.width = old


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("narrow")
    data = folder / "d.jsonl"
    src = (SHARED / "data" / "gsm8k" / "test.jsonl").read_text().splitlines()[:40]
    data.write_text("\n".join(src) + "\n")
    out = {"data": str(data), "folder": str(folder)}
    try:
        from memfit.runtime.build import tiny_config

        tiny = folder / "tiny.json"
        tiny.write_text(json.dumps(tiny_config("llama", layers=1, hidden=32, heads=2, kv_heads=1, vocab=64)))
        out["tiny"] = str(tiny)
    except ImportError:
        pass
    return out


COMMANDS = {
    "models": ["models"],
    "gpus": ["gpus"],
    "params": ["params", "llama-3.1-8b"],
    "estimate": ["estimate", "llama-3.1-8b", "--rank", "16", "--batch", "4", "--seq", "2048", "--gpu", "24GiB",
                 "--explain"],
    "estimate-config": ["estimate", "--config", AXOLOTL],
    "estimate-config-deepspeed": ["estimate", "--config", TRL_DS],  # 27-character field names, nested values
    "demo": ["demo"],
    "fit": ["fit", "llama-3.1-8b", "--gpu", "24GiB", "--rank", "64", "--batch", "4", "--seq", "2048"],
    "fit-data": ["fit", "llama-3.1-8b", "--gpu", "24GiB", "--data", "{data}", "--tokenizer", NEOX, "--prompt",
                 "question", "--completion", "answer", "--no-search"],
    "lengths": ["lengths", "{data}", "-t", NEOX, "--prompt", "question", "--completion", "answer", "--model",
                "llama-3.1-8b"],
    "pack": ["pack", "{data}", "-t", NEOX, "--prompt", "question", "--completion", "answer", "--seq-len", "512",
             "--out", "{folder}/rows.jsonl", "--force"],
    "verify-pack": ["verify-pack", "{data}", "-t", NEOX, "--prompt", "question", "--completion", "answer",
                    "--seq-len", "512", "--limit", "6"],
    "trace": ["trace", "{tiny}", "--batch", "1", "--seq", "16", "--gpu", "24GiB"],
    "measure": ["measure", "{tiny}", "--batch", "1", "--seq", "16", "--steps", "1", "--device", "cpu"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_table_cuts_a_value_at_80_columns(name: str, cli: Cli, eighty: None, files: dict[str, str]) -> None:
    argv = COMMANDS[name]
    if any("{tiny}" in a for a in argv) and "tiny" not in files:
        pytest.skip("needs torch")
    rc, out, err = cli([a.format(**files) for a in argv])
    assert rc == 0, err
    lines = (out + err).splitlines()
    assert not [line for line in lines if "…" in line], "\n".join(lines)
    assert max(len(line) for line in lines) <= 80  # nothing cropped at the edge either
    assert "┃" in out or "│" in out  # a table was printed


def test_narrow_keeps_names_whole_and_drops_columns_in_order() -> None:
    """A 48-column terminal: the name stays whole, figures stay whole, prose wraps, and the columns named in
    drop go, in order, until it fits."""
    t = Table()
    for header, justify in (("name", "left"), ("type", "left"), ("notes", "left"), ("bytes", "right")):
        t.add_column(header, justify=justify)  # type: ignore[arg-type]
    t.add_row("llama-3.1-70b", "llama", "a long note that can wrap between its words", "141,107,412,992")
    dropped = narrow(t, keep=("name",), drop=("type", "notes"), width=48)
    assert [h for h, _ in dropped] == ["type"] and [c.header for c in t.columns] == ["name", "notes", "bytes"]
    from rich.console import Console

    console = Console(width=48, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(t)
    text = console.export_text()
    assert "llama-3.1-70b" in text and "141,107,412,992" in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 48


def test_split_columns_gives_each_point_a_place_at_80_columns() -> None:
    """measure's category table has one column per point: 12 points do not fit in 80 columns, so they come
    as several tables, each starting with the category, every figure whole and once."""
    from rich.console import Console

    from memfit.report._width import split_columns

    t = Table(title="alive at the peak, by category")
    t.add_column("category")
    for i in range(12):
        t.add_column(f"b{i + 1} s2048 none", justify="right")
    t.add_row("activations", *[f"{100 + i}.25 MiB" for i in range(12)])
    parts = split_columns(t, width=80)
    assert len(parts) > 1 and all(p.columns[0].header == "category" for p in parts)
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    for p in parts:
        console.print(p)
    text = console.export_text()
    assert all(text.count(f"{100 + i}.25 MiB") == 1 for i in range(12)) and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
