"""Tokenising records the way a fine-tuning run does, with labels that say which tokens carry the loss.

Three layouts, each encoded in batches through the fast (Rust) tokenizer:

``text``
    ``tokenizer(text)`` with the tokenizer's own special tokens (BOS for Llama 2), then EOS appended
    when the tokenizer has one and the text does not already end with it (TRL's ``SFTTrainer`` does the
    same, so the model learns to stop). Which token is EOS, if any, is the rule of
    :func:`memfit.data.tokenizer.special_tokens` (``--eos``/``--no-eos``, ``tokenizer_config.json``, the
    post-processor, the SentencePiece model). Every token carries the loss: ``labels == input_ids``.

``prompt`` + ``completion``
    The prompt and the completion are tokenised separately and concatenated:
    ``tokenizer(prompt)`` (special tokens included, e.g. BOS) + ``tokenizer(completion,
    add_special_tokens=False)`` + ``[EOS]``. Labels are -100 on the prompt tokens and equal the ids on
    the completion and EOS, so only the completion carries loss (completion-only loss). Tokenising the
    two separately keeps the prompt/completion boundary on a token boundary, as completion-only
    trainers need; it can differ from tokenising the joined string by a token at the seam.

``messages``
    A chat (OpenAI ``role``/``content`` or ShareGPT ``from``/``value``) rendered to text with the
    tokenizer's chat template, then encoded without adding special tokens (the template writes them,
    as ``apply_chat_template(tokenize=True)`` does). Labels are kept on the assistant turns only. An
    assistant turn is located in the rendered text, so templates that render earlier turns differently
    from the last one (Qwen3 drops ``<think>`` blocks from history) are handled: the turn's span runs
    from the end of the template's generation prompt before it (``<|im_start|>assistant\\n`` for Qwen3,
    learnt by rendering a probe chat with and without ``add_generation_prompt``) through the content
    and the end-of-turn special token that follows it (``<|im_end|>``). A token carries loss when it
    starts inside a span.

Worked example (GSM8K train record 1, Llama 2): the question "Natalia sold clips to 48 ..." encodes to
BOS + 41 tokens, the answer to 62 tokens, + EOS: ``input_ids`` has 42 + 62 + 1 = 105 tokens, of which
62 + 1 = 63 carry loss.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memfit.data.records import FieldSpec, infer_fields, normalise_messages
from memfit.data.tokenizer import special_tokens
from memfit.errors import MemfitError
from memfit.estimate.constants import IGNORE_INDEX

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["TokenizedBatch", "TokenizedExample", "assistant_spans", "iter_tokenized", "render_chats",
           "tokenize_records"]

CHUNK = 1024  # records per batched encode call (one progress-bar step)


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenizedExample:
    """One training example: token ids and labels (-100 where no loss is taken), same length."""

    input_ids: list[int]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def loss_tokens(self) -> int:
        """Tokens whose label is not -100 (before the causal shift the model applies)."""
        return sum(1 for label in self.labels if label != IGNORE_INDEX)

    def to_dict(self) -> dict[str, Any]:
        return {"input_ids": self.input_ids, "labels": self.labels}


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenizedBatch:
    """Up to :data:`CHUNK` consecutive records, tokenised: ``examples[i]`` came from line ``lines[i]``;
    ``rejected`` maps a position in the batch to why its chat could not be rendered (its example is empty)."""

    lines: list[int]
    examples: list[TokenizedExample]
    rejected: dict[int, str]


def iter_tokenized(
    tokenizer: PreTrainedTokenizerBase,
    rows: Iterable[tuple[int, dict[str, Any]]],
    spec: FieldSpec,
    *,
    add_eos: bool = True,
    keep_rejected: bool = True,
    chunk: int = CHUNK,
    numbered_by_line: bool = True,
) -> Iterator[TokenizedBatch]:
    """Tokenise ``(line, record)`` pairs as they come, ``chunk`` records per batched encode call, in the
    layout ``spec`` names (module docstring); only one batch is held at a time.

    The batch call goes to the fast tokenizer's ``encode_batch``, which encodes the texts in parallel in Rust
    (as many threads as cores; ``TOKENIZERS_PARALLELISM=false`` or ``RAYON_NUM_THREADS=N`` limit it, see
    :func:`memfit.data.tokenizer.load_tokenizer`).

    Args:
        tokenizer: a fast transformers tokenizer (:func:`memfit.data.tokenizer.load_tokenizer`).
        rows: ``(line, record)`` pairs, as :func:`memfit.data.formats.open_records` streams them.
        spec: which fields to tokenise (not ``"none"``: infer it first).
        add_eos: append EOS in the text and prompt/completion layouts (chats end as their template says).
        keep_rejected: a chat the template rejects stands in the batch as an empty example, with the reason
            in ``rejected``; with False it raises.
        chunk: records per encode call.
        numbered_by_line: the numbers in ``rows`` are lines of a file (else indices), for messages.
    """
    if spec.mode == "none":
        raise MemfitError("name the fields to tokenise: text=, prompt= and completion=, or messages=")
    eos = special_tokens(tokenizer).eos_id if add_eos else None
    markers = _template_markers(tokenizer) if spec.mode == "messages" else None
    lines: list[int] = Lines() if numbered_by_line else []
    records: list[dict[str, Any]] = []
    for line, record in rows:
        lines.append(line)
        records.append(record)
        if len(records) >= chunk:
            yield _tokenize_batch(tokenizer, lines, records, spec, eos, markers, keep_rejected)
            lines, records = (Lines() if numbered_by_line else []), []
    if records:
        yield _tokenize_batch(tokenizer, lines, records, spec, eos, markers, keep_rejected)


def _tokenize_batch(tokenizer: PreTrainedTokenizerBase, lines: list[int], records: list[dict[str, Any]],
                    spec: FieldSpec, eos: int | None, markers: tuple[str, list[str]] | None,
                    keep_rejected: bool) -> TokenizedBatch:
    rejected: dict[int, str] = {}
    if spec.mode == "text":
        out = []
        for x in _encode([r[spec.text] for r in records], tokenizer, special=True):
            if eos is not None and (not x or x[-1] != eos):
                x.append(eos)
            out.append(TokenizedExample(input_ids=x, labels=list(x)))
    elif spec.mode == "prompt_completion":
        p_ids = _encode([r[spec.prompt] for r in records], tokenizer, special=True)
        c_ids = _encode([r[spec.completion] for r in records], tokenizer, special=False)
        tail = [eos] if eos is not None else []
        out = []
        for p, c in zip(p_ids, c_ids, strict=True):
            c = c + tail
            out.append(TokenizedExample(input_ids=p + c, labels=[IGNORE_INDEX] * len(p) + c))
    else:
        out = _tokenize_chats(tokenizer, [r[spec.messages] for r in records], rejected if keep_rejected else None,
                              markers, numbers=lines)
    return TokenizedBatch(lines=lines, examples=out, rejected=rejected)


def tokenize_records(
    tokenizer: PreTrainedTokenizerBase,
    records: Sequence[dict[str, Any]],
    *,
    text: str | None = None,
    prompt: str | None = None,
    completion: str | None = None,
    messages: str | None = None,
    progress: bool = True,
    add_eos: bool = True,
    rejected: dict[int, str] | None = None,
) -> list[TokenizedExample]:
    """Tokenise ``records`` (one example each, in order) in one of the three layouts (module docstring);
    :func:`iter_tokenized` over a list, all examples kept.

    Args:
        tokenizer: a fast transformers tokenizer (:func:`memfit.data.tokenizer.load_tokenizer`).
        records: the records, as :func:`memfit.data.formats.load_records` reads them.
        text: the field holding the whole text.
        prompt: the field holding the prompt (no loss).
        completion: the field holding the completion.
        messages: the field holding a chat. With no field named, the fields are inferred as
            :func:`memfit.data.records.infer_fields` does.
        progress: show a progress bar (on a terminal).
        add_eos: append EOS in the text and prompt/completion layouts (chats end as their template says).
        rejected: collect the chats the template rejects here (index -> reason), each standing in the output
            as an empty example; without it such a chat raises.

    Returns:
        One example per record, in order.

    Raises:
        MemfitError: no field named or inferable, no chat template for ``messages``, or a chat the template
            rejects (without ``rejected``).
    """
    from memfit.progress import progress_bar

    spec = FieldSpec(text=text, prompt=prompt, completion=completion, messages=messages)
    if spec.mode == "none" and records:  # the same inference as load_records
        seen: dict[str, None] = {}
        for r in records[:1000]:
            seen.update(dict.fromkeys(map(str, r)))
        spec = infer_fields(list(seen))
    out: list[TokenizedExample] = []
    if not records:
        return out
    with progress_bar("tokenising", total=len(records), unit="examples", enabled=None if progress else False) as bar:
        for batch in iter_tokenized(tokenizer, enumerate(records), spec, add_eos=add_eos,
                                    keep_rejected=rejected is not None, numbered_by_line=False):
            if rejected is not None:
                rejected.update({batch.lines[i]: why for i, why in batch.rejected.items()})
            out.extend(batch.examples)
            bar.update(len(out), len(records))
    return out


def render_chats(tokenizer: PreTrainedTokenizerBase, chats: Sequence[Any],
                 rejected: dict[int, str] | None = None, *, numbers: Sequence[int] | None = None) -> list[str]:
    """Each chat rendered to text with the tokenizer's chat template (no generation prompt).

    A chat the template rejects (e.g. roles that do not alternate, for templates that insist) raises a
    MemfitError naming it; when a ``rejected`` dict is given it is recorded there (index -> reason) and
    rendered as ``""`` instead. ``numbers`` names the chats in messages (their lines; default: their index).
    """
    if not getattr(tokenizer, "chat_template", None):
        raise MemfitError(f"the tokenizer {getattr(tokenizer, 'name_or_path', '')} has no chat template, so "
                          "--messages cannot be rendered: use a tokenizer with one (e.g. an instruct model's) "
                          "or --text / --prompt --completion")
    out = []
    for i, chat in enumerate(chats):
        msgs = chat if _is_normalised(chat) else normalise_messages(chat)
        try:
            out.append(str(tokenizer.apply_chat_template(msgs, tokenize=False)))
        except Exception as exc:  # jinja raises TemplateError for chats the template rejects
            if rejected is None:
                raise MemfitError(f"the chat template rejects {_name(numbers, i)}: {exc}") from exc
            rejected[i] = f"the chat template rejects it: {exc}"
            out.append("")
    return out


def assistant_spans(tokenizer: PreTrainedTokenizerBase, msgs: list[dict[str, str]], rendered: str,
                    *, markers: tuple[str, list[str]] | None = None) -> list[tuple[int, int]]:
    """Character spans of the assistant turns of ``msgs`` in their rendering ``rendered``.

    A span runs from the end of the generation prompt before the turn's content (or the content's start
    when the template has none) through the content and a directly following end-of-turn special token.
    """
    gen_prompt, specials = markers if markers is not None else _template_markers(tokenizer)
    spans = []
    cursor = 0
    for k, msg in enumerate(msgs):
        if msg["role"] != "assistant":
            # advance past non-assistant content so an assistant turn quoting it is not matched early
            pos = rendered.find(msg["content"], cursor) if msg["content"] else -1
            if pos >= 0:
                cursor = pos + len(msg["content"])
            continue
        content = msg["content"]
        start = rendered.find(content, cursor)
        if start < 0 and content.strip():
            content = content.strip()
            start = rendered.find(content, cursor)
        if start < 0:
            raise MemfitError(f"cannot find assistant turn {k} in the chat template's rendering; "
                              "the template rewrites assistant content in a way memfit cannot follow")
        end = start + len(content)
        if gen_prompt:
            head = rendered.rfind(gen_prompt, cursor, start + 1)
            if head >= 0:
                start = head + len(gen_prompt)
        for special in specials:
            m = re.match(r"\s*" + re.escape(special), rendered[end:])
            if m:
                end += m.end()
                break
        spans.append((start, end))
        cursor = end
    return spans


# ---------------------------------------------------------------------------------------------------


def _encode(texts: list[str], tokenizer: PreTrainedTokenizerBase, *, special: bool, offsets: bool = False) -> Any:
    """One batched call of the fast tokenizer (``encode_batch``, parallel in Rust): the ids, and the character
    offsets when asked.

    Ids alone go straight to the Rust tokenizer's ``encode_batch_fast`` (no offsets computed, no Python
    ``BatchEncoding``: about twice as fast as ``tokenizer(texts)`` on GSM8K questions) when
    :func:`_direct_backend` has checked that it gives the same ids as the transformers call."""
    backend = None if offsets else _direct_backend(tokenizer)
    if backend is not None:
        return [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=special)]
    enc = tokenizer(texts, add_special_tokens=special, return_attention_mask=False, return_token_type_ids=False,
                    return_offsets_mapping=offsets)
    return (enc["input_ids"], enc["offset_mapping"]) if offsets else enc["input_ids"]


_BACKEND_ATTR = "memfit_direct_backend"
_BACKEND_PROBES = ["memfit probe: 24 GiB,  two  spaces\n and a tab\t.", "", " leading space", "日本語 émoji 🙂"]


def _direct_backend(tokenizer: PreTrainedTokenizerBase) -> Any:
    """The ``tokenizers.Tokenizer`` behind a fast transformers tokenizer, when encoding with it directly is the
    same as calling the transformers tokenizer: no truncation or padding configured on it (transformers turns
    those off per call; the Rust object would apply them), and the same ids on probe texts with and without
    special tokens. None otherwise (then the transformers call is used). Decided once per tokenizer."""
    cached = getattr(tokenizer, _BACKEND_ATTR, False)
    if cached is not False:
        return cached
    backend = getattr(tokenizer, "_tokenizer", None)
    ok = (backend is not None and hasattr(backend, "encode_batch_fast") and backend.truncation is None
          and backend.padding is None)
    if ok:
        try:
            for special in (True, False):
                via_hf = tokenizer(_BACKEND_PROBES, add_special_tokens=special, return_attention_mask=False,
                                   return_token_type_ids=False)["input_ids"]
                direct = [e.ids for e in backend.encode_batch_fast(_BACKEND_PROBES, add_special_tokens=special)]
                ok = ok and [list(x) for x in via_hf] == direct
        except Exception:  # any surprise: the transformers call, which is what training uses
            ok = False
    chosen = backend if ok else None
    try:
        setattr(tokenizer, _BACKEND_ATTR, chosen)
    except AttributeError:
        pass
    return chosen


class Lines(list[int]):
    """Record numbers that are lines of a file (a chat is then named "the chat at line N", not "chat N")."""


def _name(numbers: Sequence[int] | None, i: int) -> str:
    if numbers is None:
        return f"chat {i}"
    return f"the chat at line {numbers[i]}" if isinstance(numbers, Lines) else f"chat {numbers[i]}"


def _is_normalised(chat: Any) -> bool:
    return isinstance(chat, list) and all(isinstance(m, dict) and set(m) == {"role", "content"} for m in chat)


def _template_markers(tokenizer: PreTrainedTokenizerBase) -> tuple[str, list[str]]:
    """The generation prompt and the end-of-turn special tokens, learnt from probe renderings."""
    probe = [{"role": "user", "content": "memfit-probe-question"}]
    try:
        bare = str(tokenizer.apply_chat_template(probe, tokenize=False))
        gen = str(tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True))
        full = str(tokenizer.apply_chat_template(
            [*probe, {"role": "assistant", "content": "memfit-probe-answer"}], tokenize=False))
    except Exception:  # a template that rejects the probe: content spans, plus EOS when it follows
        eos = getattr(tokenizer, "eos_token", None)
        return "", [str(eos)] if eos else []
    gen_prompt = gen[len(bare):].lstrip("\n") if gen.startswith(bare) else ""
    after = full.split("memfit-probe-answer", 1)[1] if "memfit-probe-answer" in full else ""
    specials = [s for s in _special_strings(tokenizer) if after.lstrip().startswith(s)]
    return gen_prompt, specials[:1]  # the longest special token that ends an assistant turn, if any


def _special_strings(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    names = {str(t) for t in getattr(tokenizer, "all_special_tokens", []) if t}
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    names.update(str(t.content) for t in decoder.values() if getattr(t, "special", False))
    return sorted(names, key=len, reverse=True)


def _tokenize_chats(tokenizer: PreTrainedTokenizerBase, chats: list[Any], rejected: dict[int, str] | None,
                    markers: tuple[str, list[str]] | None = None, *, numbers: Sequence[int] | None = None
                    ) -> list[TokenizedExample]:
    msgs_list = [normalise_messages(c) for c in chats]
    texts = render_chats(tokenizer, msgs_list, rejected, numbers=numbers)
    if markers is None:
        markers = _template_markers(tokenizer)
    ids_list, offs_list = _encode(texts, tokenizer, special=False, offsets=True)
    out = []
    for i, (msgs, text, ids, offs) in enumerate(zip(msgs_list, texts, ids_list, offs_list, strict=True)):
        if rejected is not None and i in rejected:
            out.append(TokenizedExample(input_ids=[], labels=[]))
            continue
        try:
            spans = assistant_spans(tokenizer, msgs, text, markers=markers)
        except MemfitError as exc:
            if rejected is None:
                raise MemfitError(f"{_name(numbers, i)}: {exc}") from exc
            rejected[i] = str(exc)
            out.append(TokenizedExample(input_ids=[], labels=[]))
            continue
        labels = [IGNORE_INDEX] * len(ids)
        s = 0
        for j, (a, _b) in enumerate(offs):
            while s < len(spans) and a >= spans[s][1]:
                s += 1
            if s == len(spans):
                break
            if spans[s][0] <= a < spans[s][1]:
                labels[j] = ids[j]
        out.append(TokenizedExample(input_ids=list(ids), labels=labels))
    return out
