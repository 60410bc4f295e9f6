"""Tables, sentences and JSON for ``memfit fit``: the ordered plan step by step, the cheapest configuration
beside it. The advisor returns data (:mod:`memfit.advise.result`): codes, figures and factors; every
sentence about a step, a skipped remedy or a requirement is written here, for the terminal and for the
HTML page alike (both read the same fields, the HTML from the ``--json`` output)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from memfit.advise import FitReport, Setup, setup_changes
from memfit.estimate.fits import reserved_bytes
from memfit.report._width import narrow
from memfit.units import BYTES_PER_GIB, BYTES_PER_MB, BYTES_PER_MIB

SEQ_FALLBACK = ("no data given: the seq_len step uses the longest multiple of 64 that fits, no shorter than half "
                "the sequence, and cannot say how many examples that truncates")
SHARDED_STATES = {"zero1": "optimizer states", "zero2": "optimizer states and gradients",
                  "zero3": "optimizer states, gradients and weights"}


def fit_json(report: FitReport) -> dict[str, Any]:
    """The advisor's data: fits_initially, steps, final, fits, cheapest (plus context keys); no sentences."""
    return report.to_dict()


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / BYTES_PER_GIB:.2f}"


def step_cost(action: str, facts: Mapping[str, Any], time_factor: float, *, time_source: str = "") -> str:
    """The cost of one step of the plan, in words, from its ``facts`` and ``time_factor``.

    >>> step_cost("micro_batch", {"batch": 1, "grad_accum": 8, "effective": 8, "from_batch": 8,
    ...           "from_grad_accum": 1}, 1.108)
    'a little time: x1.11 (more, smaller micro-steps); nothing statistical: effective batch 1 x 8 = 8, as 8 x 1'
    """
    f = time_factor
    if action == "longest_example":
        return (f"nothing: the longest of {facts['examples']:,} examples has {facts['longest']} tokens, so no batch "
                f"is padded beyond {facts['seq']} (a multiple of 64); no example is truncated")
    if action == "attention":
        return ("nothing: the same attention, computed by torch's sdpa kernel without storing the seq x seq scores "
                "(usually faster)")
    if action == "checkpointing":
        return f"time only: x{f:.2f} step time ({time_source}); set model.config.use_cache = False"
    if action == "micro_batch":
        b, accum = facts["batch"], facts["grad_accum"]
        return (f"a little time: x{f:.2f} (more, smaller micro-steps); nothing statistical: effective batch "
                f"{b} x {accum} = {facts['effective']}, as {facts['from_batch']} x {facts['from_grad_accum']}")
    if action == "chunked_loss":
        return (f"nothing statistical, ~x1.00 time: a fused linear cross-entropy (Liger Kernel or cut-cross-entropy) "
                f"never holds the {facts['vocab']:,}-wide fp32 logits")
    if action == "packing":
        e, mean, seq = facts["examples"], facts["mean_tokens"], facts["seq"]
        return (f"time saved: x{f:.2f} (padding {100 * facts['waste_random']:.0f}% -> "
                f"{100 * facts['waste_packed']:.0f}%); the effective batch kept: {e:,} examples x mean {mean:,.1f} "
                f"tokens = {e * mean:,.0f} tokens per optimizer step / ({seq:,} x {100 * facts['efficiency']:.1f}% "
                f"packing efficiency) = {facts['rows_exact']:.2f} -> {facts['rows']} rows of {seq:,} "
                f"({facts['batch']} x accum {facts['grad_accum']}), carrying {facts['examples_carried']:.1f} examples "
                f"per step on average (was {e:,}); keep examples apart (position_ids reset) and the -100 labels: "
                "check with memfit verify-pack")
    if action == "sharding":
        z = facts["stage"]
        comm = "; per step " + ", ".join(
            f"{verb} {facts[name] / 1e9:,.2f} GB" for name, verb in (
                ("all_gather_bytes", "all-gathered"), ("reduce_scatter_bytes", "reduce-scattered"),
                ("all_reduce_bytes", "all-reduced")) if facts.get(name))
        nodes = facts.get("nodes", 1)
        per = facts.get("gpus_per_node") or 8
        where = f" ({nodes} nodes of {per}: inter-node links carry it)" if nodes > 1 else ""
        return (f"time: x{f:.2f} ({'assumed, ' if z == 'zero3' else ''}communication); {z} shards the "
                f"{SHARDED_STATES[z]} over {facts['gpus']} GPUs{where}{comm if len(comm) > 11 else ''}")
    if action == "seq_len":
        change = f"changes the task: seq {facts['from_seq']} -> {facts['to_seq']}"
        cut = facts.get("truncated")
        if cut is None:
            return (f"{change}; share of examples truncated UNKNOWN without data (fallback rule: the longest "
                    "multiple of 64 that fits, no shorter than half the sequence); check with memfit lengths DATA "
                    "--tokenizer T")
        n = facts["examples"]
        return f"{change} truncates {cut:,} of {n:,} examples ({100 * cut / n:.1f}%; p95 = {facts['p95']} tokens)"
    if action == "adapter":
        return f"quality: trains a rank-{facts['rank']} LoRA adapter instead of every weight"
    if action == "quantize":
        return f"some quality: a 4-bit NF4 base (QLoRA); time x{f:.2f} assumed (dequantisation)"
    if action == "eval_accumulation":
        return (f"a little evaluation time: the kept logits go to the host every {facts['eval_accumulation_steps']} "
                f"eval steps (--eval-accumulation-steps; {facts['from_kept']} steps' logits were on the GPU at once); "
                "training unchanged")
    if action == "eval_batch":
        return (f"evaluation time: eval batch {facts['from_eval_batch']} -> {facts['to_eval_batch']} "
                "(--eval-batch, per_device_eval_batch_size); training unchanged")
    if action == "prediction_loss_only":
        return ("the metrics: --prediction-loss-only keeps no logits, so compute_metrics gets none (the eval loss "
                "stays); training unchanged")
    if action == "rank":
        r0, r1 = facts["from_rank"], facts["to_rank"]
        return f"capacity: rank {r0} -> {r1} ({r0 // r1}x fewer adapter parameters); saves the least of any step"
    return f"x{f:.2f} step time"


def skip_reason(action: str, reason: str, facts: Mapping[str, Any]) -> str:
    """Why a remedy was skipped, in words.

    >>> skip_reason("rank", "at_min_rank", {"rank": 8, "min_rank": 8})
    'rank 8 is already at most 8'
    """
    if reason == "needs_data":
        why = " (padding waste is a property of the data)" if action == "packing" else ""
        return "needs --data and --tokenizer" + why
    if reason == "already":
        return f"already {facts['value']}"
    if reason == "no_kernel":
        return f"transformers has no {facts['value']} path for {facts['model_type']}"
    if reason == "longest_reaches_seq":
        return f"the longest example ({facts['longest']} tokens) reaches seq {facts['seq']}"
    if reason == "micro_batch_one":
        return "micro-batch is already 1"
    if reason == "one_gpu":
        return "one GPU (pass --gpus N to shard over N)"
    if reason == "at_p95":
        return (f"seq {facts['seq']} is already at or below the data's p95 ({facts['p95']} tokens, {facts['floor']} "
                "rounded up to 64)")
    if reason == "too_short":
        return "sequence already short"
    if reason == "method":
        return f"method is {facts['value']}"
    if reason == "at_min_rank":
        return f"rank {facts['rank']} is already at most {facts['min_rank']}"
    if reason == "no_rank":
        return "full fine-tuning has no rank"
    if reason == "not_eval_peak":
        return "the evaluation step is not the peak"
    if reason == "saves_too_little":
        saved = int(facts["saved_bytes"])
        return "saves nothing here" if saved <= 0 else f"saves only {saved / BYTES_PER_MIB:,.1f} MiB here"
    if reason == "not_modelled":
        return f"memfit estimate does not model {facts['value']} with {facts['why']}"
    return "does not apply"


def need_text(need: str, spec: Mapping[str, Any]) -> str:
    """What one requirement of a configuration (:data:`memfit.advise.result.Need`) takes, in words; ``spec``
    is that configuration's spec (``RunSpec.to_dict()``)."""
    if need == "gradient_checkpointing":
        return "model.gradient_checkpointing_enable(); model.config.use_cache = False"
    if need == "segment_checkpointing":
        k = spec.get("checkpoint_every") if spec.get("checkpointing") == "every-k" else "ceil(sqrt(L))"
        return (f"segment checkpointing ({k} blocks per torch.utils.checkpoint call): not what "
                "gradient_checkpointing_enable() does, which checkpoints every block")
    if need == "flash_attention":
        return "flash-attn installed, attn_implementation='flash_attention_2'"
    if need == "fused_cross_entropy":
        return "a fused linear cross-entropy (Liger Kernel or cut-cross-entropy)"
    if need == "packing":
        return "packing with position_ids reset and -100 labels kept (memfit verify-pack)"
    if need in ("zero1", "zero2", "zero3"):
        stage = need[-1]
        fsdp = {"1": "", "2": " / FSDP SHARD_GRAD_OP", "3": " / FSDP FULL_SHARD"}[stage]
        return f"DeepSpeed ZeRO stage {stage}{fsdp}"
    if need == "bitsandbytes":
        return "bitsandbytes (4-bit NF4)"
    return need


def seq_rule_text(rule: str | None) -> str | None:
    """The sequence step's rule in words when it had no data (None with data)."""
    return SEQ_FALLBACK if rule == "fallback" else None


def describe_changes(before: Setup, after: Setup) -> str:
    """``"batch 8->2, grad_accum 1->4"``: the knobs that differ."""
    parts = []
    changes = setup_changes(before, after)
    if "checkpointing" in changes or "checkpoint_every" in changes:
        changes.pop("checkpoint_every", None)
        changes["checkpointing"] = [_ckpt(before), _ckpt(after)]
    for key, (old, new) in changes.items():
        old_s = ",".join(old) if isinstance(old, list) else old
        new_s = ",".join(new) if isinstance(new, list) else new
        parts.append(f"{key} {old_s}->{new_s}")
    return ", ".join(parts) or "(no change)"


def _ckpt(setup: Setup) -> str:
    s = setup.spec
    return f"every-{s.checkpoint_every}" if s.checkpointing == "every-k" else s.checkpointing


def fit_table(report: FitReport, width: int | None = None) -> Group:
    """The ordered path as a table (GiB = 1024^3 bytes), then the verdict, the cheapest configuration,
    the rank lesson in numbers, and the steps skipped. Narrower than the table (``width``, the terminal's by
    default), each step's cost is printed under the table instead of in it."""
    gpu = report.gpu
    per = " per GPU" if report.gpus > 1 else ""
    what = "reserved" if report.device == "cuda" else "peak"
    title = (f"memfit fit: {report.model} on {gpu.name} ({_gib(gpu.bytes)} GiB{per}"
             f"{f' x {report.gpus}' if report.gpus > 1 else ''}); fits = {what} + headroom "
             f"{_gib(report.headroom_bytes)} GiB ({report.headroom.describe()}) <= {_gib(gpu.bytes)} GiB, "
             f"i.e. {what} <= {_gib(report.budget_bytes)} GiB")
    t = Table(title=title, title_justify="left", caption=f"start: {_spec_summary(report.initial)}",
              caption_justify="left")
    t.add_column("#", justify="right")
    t.add_column("step", no_wrap=True)
    t.add_column("change")
    t.add_column("peak GiB", justify="right")
    if report.device == "cuda":
        t.add_column("reserved GiB", justify="right")
    t.add_column("saved GiB", justify="right")
    t.add_column("fits")
    t.add_column("cost", overflow="fold", max_width=70)
    ok = "[green]yes[/]"
    no = "[red]no[/]"
    def figures(peak: int, reserved: int) -> list[str]:
        cells = [_gib(peak)]
        if report.device == "cuda":
            cells.append(_gib(reserved))
        return cells

    t.add_row("0", "start", "(as given)", *figures(report.initial_peak_bytes, report.initial_reserved_bytes), "",
              ok if report.fits_initially else no, "")
    previous = report.initial
    for i, step in enumerate(report.steps, 1):
        cost = step_cost(step.action, step.facts, step.time_factor, time_source=report.time_model.source)
        t.add_row(str(i), step.action, describe_changes(previous, step.setup), *figures(step.peak_bytes, step.reserved),
                  _gib(step.saved_bytes), ok if step.fits else no, cost)
        previous = step.setup
    # a narrow terminal: the cost prose goes under the table, step by step, before a flag or a figure is cut
    moved = narrow(t, keep=("step",), drop=("cost",), width=width)
    lines: list[Any] = [t]
    for _, cells in moved:
        lines += [Text(f"step {i} cost: {cell}", style="dim") for i, cell in enumerate(cells) if cell]
    lines.append(_verdict(report))
    lines.append(_cheapest_line(report))
    if report.rank_reduction is not None:
        r = report.rank_reduction
        lines.append(Text(
            f"Why rank comes last: rank {r.from_rank} -> {r.to_rank} alone saves "
            f"{r.saved_bytes / BYTES_PER_MB:,.0f} MB "
            f"(10^6 B; {r.trainable_from:,} -> {r.trainable_to:,} adapter parameters) against "
            f"{r.activation_bytes / BYTES_PER_GIB:.2f} GiB of activations: peak {_gib(r.peak_after_bytes)} GiB, "
            f"{'fits' if r.fits_after else 'still does not fit'}.", style="dim"))
    seq_rule = seq_rule_text(report.seq_rule)
    if seq_rule and any(s.action == "seq_len" for s in report.steps):
        lines.append(Text(f"Sequence length: {seq_rule}.", style="dim"))
    if report.skipped:
        lines.append(Text("Skipped: " + "; ".join(f"{s.action} ({skip_reason(s.action, s.reason, s.facts)})"
                                                  for s in report.skipped), style="dim"))
    message = report.allocator.message() if report.allocator is not None else None
    if message:
        lines.append(Text(f"Allocator: {message}; replayed over an allocation sequence synthesised from the "
                          "estimate (CUDA-unverified).", style="yellow"))
    reserved = ("reserved = the CUDA caching allocator's reserved peak, replayed over the estimate's allocation "
                "sequence (memfit.estimate.allocator), + 512 MiB of CUDA context (assumed), what nvidia-smi shows; "
                if report.device == "cuda" else "")
    lines.append(Text(f"Time factors: checkpointing x{report.time_model.checkpoint_factor:.2f} "
                      f"({report.time_model.source}); others as documented in memfit.advise.costs. Fits: {reserved}"
                      "the headroom is kept free on top for the estimate's error and other processes; the same rule "
                      "as memfit estimate (memfit.estimate.fits).", style="dim"))
    return Group(*lines)


def _spec_summary(setup: Setup) -> str:
    s = setup.spec
    text = (f"{s.method}" + (f" r{s.rank}" if s.is_adapter else "") + f", {s.precision}, batch {s.batch} x "
            f"accum {s.grad_accum}, seq {s.seq}, ckpt {s.checkpointing}, {s.attention}, loss {s.loss}")
    if s.sharding != "none":
        text += f", {s.sharding}"
    if setup.packing:
        text += ", packed"
    return text


def _verdict(report: FitReport) -> Text:
    if report.fits_initially:
        spare = report.budget_bytes - report.initial_reserved_bytes
        return Text(f"Fits as it is: {report.initial_rule()}; {_gib(spare)} GiB to spare.",
                    style="bold green")
    start = f"The start does not fit: {report.initial_rule()}. "
    if report.fits:
        n = len(report.steps)
        cost = report.final_cost
        return Text(f"{start}Fits after {n} step{'s' if n != 1 else ''}: {report.final_rule()} "
                    f"(peak {_gib(report.final_peak_bytes)} GiB); gives up {cost.gives_up}, step time "
                    f"x{cost.time_factor:.2f}.", style="bold green")
    parts = [f"{start}Nothing on the ordered path fits: the final plan: {report.final_rule()}."]
    for label, g in (("final plan", report.smallest_gpu_final), ("spec as given", report.smallest_gpu_initial)):
        if g is not None:
            parts.append(f"Smallest GPU in the table for the {label}: {g.name} ({_gib(g.bytes)} GiB).")
        else:
            parts.append(f"No GPU in the table fits the {label}; shard over more GPUs (--gpus N).")
    return Text(" ".join(parts), style="bold red")


def _cheapest_line(report: FitReport) -> Text:
    c = report.cheapest
    if c.candidates == 0:
        return Text("Cheapest overall: search skipped (--no-search).", style="dim")
    if c.setup is None or c.cost is None or c.peak_bytes is None:
        return Text(f"Cheapest overall: none of {c.candidates:,} configurations fits.", style="red")
    change = describe_changes(report.initial, c.setup)
    spec = c.setup.spec.to_dict()
    needs = f" Needs: {'; '.join(need_text(n, spec) for n in c.needs)}." if c.needs else ""
    c_reserved = c.reserved_bytes if c.reserved_bytes is not None else reserved_bytes(c.peak_bytes, report.device)
    reserved = f", reserved {_gib(c_reserved)} GiB" if report.device == "cuda" else ""
    return Text(f"Cheapest overall ({c.candidates:,} configurations, {c.evaluated:,} estimated): {change}; "
                f"peak {_gib(c.peak_bytes)} GiB{reserved}; gives up {c.cost.gives_up}, step time "
                f"x{c.cost.time_factor:.2f}."
                + needs, style="cyan")
