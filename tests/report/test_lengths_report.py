"""The people view of ``memfit lengths``: the key figures are in the rendered table."""

from __future__ import annotations

from memfit.data.lengths import length_report


def test_people_view_renders_the_key_figures() -> None:
    from rich.console import Console

    from memfit.data.records import Skipped
    from memfit.report.lengths import lengths_renderable

    r = length_report(list(range(1, 1001)), seq_len=512, batch=4, source="x.jsonl", tokenizer="t",
                      skipped=[Skipped(line=7, reason="malformed JSON")])
    console = Console(record=True, width=160)
    console.print(lengths_renderable(r))
    text = console.export_text()
    assert "950" in text and "train at --seq-len 960" in text and "line 7: malformed JSON" in text
    assert f"{r.padding.random.waste:.1%}" in text and "488 (48.80%)" in text
