"""``memfit pack`` and ``memfit verify-pack``: pack a data set into rows, and prove a packing correct."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from memfit.cli._app import app
from memfit.cli._data_options import EosOpt, NoEosOpt, eos_choice

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


def _tokenized(data: str, tokenizer: str, fields: dict[str, str | None], eos: str | bool | None,
               limit: int | None = None) -> tuple[Any, list[Any], Any]:
    from memfit.data.formats import load_records
    from memfit.data.tokenize import tokenize_records
    from memfit.data.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer, eos=eos)
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
    eos: EosOpt = None,
    no_eos: NoEosOpt = False,
    json_out: JsonFlag = False,
) -> None:
    """Pack DATA into rows of --seq-len tokens by largest fit with exact fit: position ids restart per example, prompt
    labels keep -100, each example's first label is -100. Prints rows, efficiency and the lower bound."""
    from memfit.data.io import check_out_path, write_rows
    from memfit.data.pack import OVERFLOW_CHOICES, pack
    from memfit.data.tokenizer import special_tokens
    from memfit.errors import MemfitError
    from memfit.report import console, print_json
    from memfit.report.pack import pack_json, pack_renderable

    if overflow not in OVERFLOW_CHOICES:
        raise MemfitError(f"unknown --overflow {overflow!r}: choose one of {', '.join(OVERFLOW_CHOICES)}")
    if seq_len < 2:
        raise MemfitError(f"--seq-len must be an integer of at least 2 tokens, got {seq_len}: a causal LM learns "
                          "each token from the ones before it, so a row of 1 token carries no loss")
    check_out_path(out)  # before the slow part
    fields = {"text": text, "prompt": prompt, "completion": completion, "messages": messages}
    tok, examples, loaded = _tokenized(data, tokenizer, fields, eos_choice(eos, no_eos))
    result = pack(examples, seq_len, overflow=overflow, lines=loaded.lines)
    if not result.rows:
        acc = result.accounting()["examples"]
        raise MemfitError(f"nothing to pack: of {acc['in']:,} examples, {acc['empty']:,} are empty, "
                          f"{acc['dropped_too_long']:,} were dropped as longer than --seq-len {seq_len:,} and "
                          f"{acc['no_loss_token']:,} have no loss token left; raise --seq-len")
    size = write_rows(result, out)
    skipped = [{"line": s.line, "reason": s.reason} for s in loaded.skipped]
    rule = special_tokens(tok)
    if json_out:
        print_json(pack_json(result, data=data, tokenizer=tokenizer, out=out, out_bytes=size, skipped=skipped,
                             special_tokens=rule, mode=loaded.spec.mode))
        return
    console.print(pack_renderable(result, data=data, out=out, skipped=len(skipped), special_tokens=rule,
                                  mode=loaded.spec.mode))


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
    mask: Annotated[str, typer.Option("--mask", help="how the rows keep examples apart: position-ids (restarting "
                                      "positions, no mask; sdpa/eager/flash) | block (4D additive block mask) | "
                                      "naive (2D all-ones mask: fails, for contrast)")] = "position-ids",
    attention: Annotated[str, typer.Option("--attention", "--attn-implementation", help="the attention kernel, as "
                                           "everywhere else: sdpa | eager (on a CPU)")] = "sdpa",
    seed: Annotated[int, typer.Option("--seed", help="seed of the random model weights")] = 0,
    eos: EosOpt = None,
    no_eos: NoEosOpt = False,
    json_out: JsonFlag = False,
) -> None:
    """Prove the packing of DATA: a tiny random Llama (the tokenizer's vocabulary, fp32) gives the same logits and
    token-weighted loss on the packed rows as on each example alone, and no label lost its -100. PASS or FAIL;
    a failing check exits 1."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from memfit.data.tokenizer import special_tokens
    from memfit.data.torch.verify import mask_form, tiny_llama, verify_packing
    from memfit.errors import MemfitError
    from memfit.report import console, err_console, print_json
    from memfit.report.pack import verify_json, verify_renderable

    if attention not in ("sdpa", "eager"):
        try:  # the old meaning of verify-pack's --attention: the mask form
            form = mask_form(attention)
        except MemfitError:
            form = None
        if form is not None:
            raise MemfitError(f"--attention {attention} is a mask form: verify-pack's --attention is now the "
                              "attention kernel (sdpa | eager), as in estimate, trace and measure; pass "
                              f"--mask {form.replace('_mask', '').replace('_', '-')}")
        raise MemfitError(f"--attention must be sdpa or eager on a CPU, not {attention!r}")
    form = mask_form(mask)
    if limit < 1:
        raise MemfitError(f"--limit must be at least 1, not {limit}")
    if seq_len < 2:
        raise MemfitError(f"--seq-len must be an integer of at least 2 tokens, got {seq_len}")
    fields = {"text": text, "prompt": prompt, "completion": completion, "messages": messages}
    tok, examples, loaded = _tokenized(data, tokenizer, fields, eos_choice(eos, no_eos), limit)
    model = tiny_llama(len(tok), max_positions=max(seq_len, 16), seed=seed, attn_implementation=attention)
    with Progress(TextColumn("verifying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, disable=not sys.stderr.isatty(), transient=True) as bar:
        task = bar.add_task("verify", total=None)
        result = verify_packing(model, examples, seq_len, overflow=overflow, mask=form, limit=limit,
                                pad_token_id=tok.pad_token_id or 0,
                                on_progress=lambda done, total: bar.update(task, completed=done, total=total))
    rule = special_tokens(tok)
    if json_out:
        print_json(verify_json(result, data=data, tokenizer=tokenizer, special_tokens=rule))
    else:
        console.print(verify_renderable(result, rule, loaded.spec.mode))
    if not result.passed:
        raise SystemExit(1)  # after the report: a failing check exits non-zero
