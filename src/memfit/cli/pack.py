"""``memfit pack`` and ``memfit verify-pack``: pack a data set into rows, and prove a packing correct."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from memfit.cli._app import app

JsonFlag = Annotated[bool, typer.Option("--json", help="machine-readable output")]
Data = Annotated[str, typer.Argument(help="JSONL (.jsonl.gz), JSON, CSV, Parquet, or a save_to_disk directory")]
Tokenizer = Annotated[str, typer.Option("--tokenizer", "-t", help="tokenizer directory, tokenizer.json, "
                                        "or SentencePiece .model (offline)")]
Text = Annotated[str | None, typer.Option("--text", help="field holding the whole text")]
Prompt = Annotated[str | None, typer.Option("--prompt", help="field holding the prompt (no loss)")]
Completion = Annotated[str | None, typer.Option("--completion", help="field holding the completion")]
Messages = Annotated[str | None, typer.Option("--messages", help="field holding a chat (OpenAI role/content or "
                                              "ShareGPT from/value), rendered with the chat template")]
SeqLen = Annotated[int, typer.Option("--seq-len", help="tokens per packed row")]
OverflowOpt = Annotated[str, typer.Option("--overflow", help="an example longer than --seq-len: error | truncate "
                                          "| drop | split")]


def _tokenized(data: str, tokenizer: str, fields: dict[str, str | None],
               limit: int | None = None) -> tuple[Any, list[Any], Any]:
    from memfit.data.load import load_records
    from memfit.data.tokenize import tokenize_records
    from memfit.data.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer)
    loaded = load_records(data, **fields)
    records = loaded.records if limit is None else loaded.records[:limit]
    spec = loaded.spec  # the fields named, or inferred from the data when none were
    examples = tokenize_records(tok, records, text=spec.text, prompt=spec.prompt, completion=spec.completion,
                                messages=spec.messages, progress=sys.stderr.isatty())
    return tok, examples, loaded


@app.command("pack")
def pack_command(
    data: Data,
    tokenizer: Tokenizer,
    out: Annotated[str, typer.Option("--out", "-o", help="where to write the rows: FILE.jsonl or FILE.parquet")],
    seq_len: SeqLen = 2048,
    text: Text = None,
    prompt: Prompt = None,
    completion: Completion = None,
    messages: Messages = None,
    overflow: OverflowOpt = "error",
    json_out: JsonFlag = False,
) -> None:
    """Pack DATA into rows of --seq-len tokens by largest fit with exact fit: position ids restart per example, prompt
    labels keep -100, each example's first label is -100. Prints rows, efficiency and the lower bound."""
    from memfit.data.pack import OVERFLOW_CHOICES, pack, write_rows
    from memfit.errors import MemfitError
    from memfit.report import console, print_json
    from memfit.report.pack import pack_json, pack_renderable

    if overflow not in OVERFLOW_CHOICES:
        raise MemfitError(f"unknown --overflow {overflow!r}: choose one of {', '.join(OVERFLOW_CHOICES)}")
    if not out.lower().endswith((".jsonl", ".parquet")):
        raise MemfitError(f"--out must end in .jsonl or .parquet, not {out!r}")
    fields = {"text": text, "prompt": prompt, "completion": completion, "messages": messages}
    _, examples, loaded = _tokenized(data, tokenizer, fields)
    result = pack(examples, seq_len, overflow=overflow, lines=loaded.lines)
    size = write_rows(result, out)
    skipped = [{"line": s.line, "reason": s.reason} for s in loaded.skipped]
    if json_out:
        print_json(pack_json(result, data=data, tokenizer=tokenizer, out=out, out_bytes=size, skipped=skipped))
        return
    console.print(pack_renderable(result, data=data, out=out, skipped=len(skipped)))


@app.command("verify-pack")
def verify_pack_command(
    data: Data,
    tokenizer: Tokenizer,
    seq_len: SeqLen = 2048,
    text: Text = None,
    prompt: Prompt = None,
    completion: Completion = None,
    messages: Messages = None,
    overflow: OverflowOpt = "error",
    limit: Annotated[int, typer.Option("--limit", help="verify the first N examples")] = 32,
    attention: Annotated[str, typer.Option("--attention", help="position_ids (no mask; sdpa/eager/flash) | "
                                           "block_mask (4D additive) | naive (2D all-ones: fails, for contrast)")]
    = "position_ids",
    attn_implementation: Annotated[str, typer.Option("--attn-implementation", help="sdpa | eager")] = "sdpa",
    seed: Annotated[int, typer.Option("--seed", help="seed of the random model weights")] = 0,
    json_out: JsonFlag = False,
) -> None:
    """Prove the packing of DATA: a tiny random Llama (the tokenizer's vocabulary, fp32) gives the same logits and
    token-weighted loss on the packed rows as on each example alone, and no label lost its -100. PASS or FAIL;
    a failing check exits 1."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from memfit.data.verify import VERIFY_ATTENTION, tiny_llama, verify_packing
    from memfit.errors import MemfitError
    from memfit.report import console, err_console, print_json
    from memfit.report.pack import verify_json, verify_renderable

    if attention not in VERIFY_ATTENTION:
        raise MemfitError(f"unknown --attention {attention!r}: choose one of {', '.join(VERIFY_ATTENTION)}")
    if attn_implementation not in ("sdpa", "eager"):
        raise MemfitError(f"--attn-implementation must be sdpa or eager on a CPU, not {attn_implementation!r}")
    if limit < 1:
        raise MemfitError(f"--limit must be at least 1, not {limit}")
    fields = {"text": text, "prompt": prompt, "completion": completion, "messages": messages}
    tok, examples, _ = _tokenized(data, tokenizer, fields, limit)
    model = tiny_llama(len(tok), max_positions=max(seq_len, 16), seed=seed, attn_implementation=attn_implementation)
    with Progress(TextColumn("verifying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, disable=not sys.stderr.isatty(), transient=True) as bar:
        task = bar.add_task("verify", total=None)
        result = verify_packing(model, examples, seq_len, overflow=overflow, attention=attention, limit=limit,
                                pad_token_id=tok.pad_token_id or 0,
                                on_progress=lambda done, total: bar.update(task, completed=done, total=total))
    if json_out:
        print_json(verify_json(result, data=data, tokenizer=tokenizer))
    else:
        console.print(verify_renderable(result))
    if not result.passed:
        raise SystemExit(1)  # after the report: a failing check exits non-zero
