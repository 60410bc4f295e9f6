"""``memfit pack`` and ``memfit verify-pack``: pack a data set into rows, and prove a packing correct."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from memfit.cli._app import JsonFlag, app
from memfit.cli._data_options import EosOpt, NoEosOpt, eos_choice

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


ForceOpt = Annotated[bool, typer.Option("--force", help="replace --out if it exists")]


def _first_examples(data: str, tokenizer: str, fields: dict[str, str | None], eos: str | bool | None,
                    limit: int) -> tuple[Any, list[Any], Any]:
    """The tokenizer, the first ``limit`` usable records tokenised, and the record stream (read no further)."""
    from itertools import islice

    from memfit.data.formats import open_records
    from memfit.data.tokenize import tokenize_records
    from memfit.data.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer, eos=eos)
    stream = open_records(data, **fields)
    records = [row for _, row in islice(stream, limit)]
    spec = stream.spec  # the fields named, or inferred from the data when none were
    examples = tokenize_records(tok, records, text=spec.text, prompt=spec.prompt, completion=spec.completion,
                                messages=spec.messages, progress=False)
    return tok, examples, stream


class _Phases:
    """One progress bar per phase of a command (reading and tokenising in bytes, then writing in rows)."""

    def __init__(self, enabled: bool) -> None:
        from contextlib import ExitStack

        self.enabled = enabled
        self._stack = ExitStack()
        self.bar: Any = None

    def start(self, description: str, total: int, unit: str) -> Any:
        from contextlib import ExitStack

        from memfit.progress import progress_bar

        self._stack.close()
        self._stack = ExitStack()
        self.bar = self._stack.enter_context(progress_bar(description, total=total, unit=unit, enabled=self.enabled))
        return self.bar

    def close(self) -> None:
        self._stack.close()


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
    force: ForceOpt = False,
    json_out: JsonFlag = False,
) -> None:
    """Pack DATA into rows of --seq-len tokens by largest fit with exact fit: position ids restart per example, prompt
    labels keep -100, each example's first label is -100. Prints rows, efficiency and the lower bound. DATA is
    streamed: any size packs in bounded memory (a scratch file of 4 bytes a token sits beside --out meanwhile)."""
    from pathlib import Path

    from memfit.data.formats import open_records
    from memfit.data.io import check_out_path, open_rows
    from memfit.data.pack import OVERFLOW_CHOICES, pack_stream
    from memfit.data.tokenize import iter_tokenized
    from memfit.data.tokenizer import load_tokenizer, special_tokens
    from memfit.errors import MemfitError
    from memfit.progress import interactive
    from memfit.report import console, print_json
    from memfit.report.pack import pack_json, pack_renderable

    if overflow not in OVERFLOW_CHOICES:
        raise MemfitError(f"unknown --overflow {overflow!r}: choose one of {', '.join(OVERFLOW_CHOICES)}")
    if seq_len < 2:
        raise MemfitError(f"--seq-len must be an integer of at least 2 tokens, got {seq_len}: a causal LM learns "
                          "each token from the ones before it, so a row of 1 token carries no loss")
    target = check_out_path(out, force=force)  # before the slow part
    fields = {"text": text, "prompt": prompt, "completion": completion, "messages": messages}
    tok = load_tokenizer(tokenizer, eos=eos_choice(eos, no_eos))
    stream = open_records(data, **fields)
    phases = _Phases(interactive(json_out))
    _, total, unit = stream.progress()
    bar = phases.start(f"tokenising {Path(data).name}", total, unit)

    def batches() -> Any:
        for batch in iter_tokenized(tok, stream, stream.spec, keep_rejected=False):
            yield batch
            done, size, _ = stream.progress()
            bar.update(done, size)

    def on_progress(phase: str, done: int, rows: int) -> None:
        if done == 0:
            phases.start(f"writing {target.name}", rows, "rows")
        phases.bar.update(done, rows)

    try:
        with open_rows(target, force=force) as writer:
            result = pack_stream(batches(), seq_len, overflow=overflow, write_row=writer.write,
                                 scratch=target.parent if str(target.parent) else Path("."), on_progress=on_progress)
            if not result.n_rows:  # inside the block: no empty file is left behind
                acc = result.accounting()["examples"]
                raise MemfitError(f"nothing to pack: of {acc['in']:,} examples, {acc['empty']:,} are empty, "
                                  f"{acc['dropped_too_long']:,} were dropped as longer than --seq-len {seq_len:,} "
                                  f"and {acc['no_loss_token']:,} have no loss token left", hint="raise --seq-len")
    finally:
        phases.close()
    size = target.stat().st_size
    skipped = [{"line": s.line, "reason": s.reason} for s in stream.skipped]
    rule = special_tokens(tok)
    if json_out:
        print_json(pack_json(result, data=data, tokenizer=tokenizer, out=out, out_bytes=size, skipped=skipped,
                             special_tokens=rule, mode=stream.spec.mode))
        return
    console.print(pack_renderable(result, data=data, out=out, skipped=len(skipped), special_tokens=rule,
                                  mode=stream.spec.mode))


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
    from memfit.data.tokenizer import special_tokens
    from memfit.data.torch.verify import mask_form, tiny_llama, verify_packing
    from memfit.errors import MemfitError
    from memfit.progress import interactive, progress_bar
    from memfit.report import console, print_json
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
    tok, examples, loaded = _first_examples(data, tokenizer, fields, eos_choice(eos, no_eos), limit)
    model = tiny_llama(len(tok), max_positions=max(seq_len, 16), seed=seed, attn_implementation=attention)
    with progress_bar(f"verifying {len(examples):,} examples packed and alone", unit="forward passes",
                      enabled=interactive(json_out)) as bar:
        result = verify_packing(model, examples, seq_len, overflow=overflow, mask=form, limit=limit,
                                pad_token_id=tok.pad_token_id or 0, on_progress=bar.update)
    rule = special_tokens(tok)
    if json_out:
        print_json(verify_json(result, data=data, tokenizer=tokenizer, special_tokens=rule))
    else:
        console.print(verify_renderable(result, rule, loaded.spec.mode))
    if not result.passed:
        raise SystemExit(1)  # after the report: a failing check exits non-zero
