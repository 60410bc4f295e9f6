"""Tables, verdicts and JSON for :class:`~memfit.estimate.MemoryEstimate`."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from memfit.estimate import MemoryEstimate, explain_estimate, gpu_table
from memfit.estimate.evaluation import eval_summary
from memfit.estimate.fits import FitVerdict, Target, verdict_fields
from memfit.estimate.synth_allocations import allocator_json, estimate_allocator
from memfit.estimate.trl_loss import trl_scored_tokens
from memfit.units import BYTES_PER_GB, BYTES_PER_GIB


def _gib(n: int) -> str:
    return f"{n / BYTES_PER_GIB:.2f} GiB"


def estimate_json(est: MemoryEstimate, target: Target | None) -> dict[str, Any]:
    """``memfit estimate --json``: the estimate, with the verdict on ``--gpu`` (``gpu``, ``gpu_bytes``, ``fits``,
    ``spare_bytes``, ``verdict``; None without one) after ``reserved_bytes``."""
    out: dict[str, Any] = {}
    for key, value in est.to_dict().items():
        out[key] = value
        if key == "reserved_bytes":
            out.update(verdict_fields(target, est.peak_bytes, est.spec.device, reserved=est.reserved_bytes))
    out["allocator"] = allocator_json(estimate_allocator(est))  # CUDA: the caching-allocator replay, else None
    return out


def estimate_table(est: MemoryEstimate) -> Table:
    """Component, bytes, GiB, share of the peak (per GPU when the model states are sharded)."""
    s = est.spec
    title = (f"{est.model}: {s.method}, {s.precision}, {s.optimizer}, batch {s.batch} x seq {s.seq}, "
             f"checkpointing {s.checkpointing}, {s.attention} on {s.device}")
    caption = f"peak at {est.peak_moment} (GiB = 1024^3 B)"
    ev = eval_summary(s, est.moments)
    if ev is not None:
        kept = (f", logits of {ev['kept_steps']} eval steps kept on the GPU for compute_metrics"
                if ev["gathers_logits"] else ", no logits kept (loss only)")
        caption += (f"; training peaks at {ev['training_peak_bytes']:,} B, evaluation (eval batch {s.eval_batch}"
                    f"{kept}) at {ev['eval_peak_bytes']:,} B")
    if est.sharded is not None:
        sh = est.sharded
        nodes = f" on {sh.nodes} nodes" if sh.nodes > 1 else ""
        title += f", {sh.sharding} over {sh.gpus} GPUs{nodes}: per GPU (per rank)"
        caption += (f"; one unsharded replica peaks at {sh.unsharded_peak_bytes:,} B "
                    f"({sh.unsharded_peak_bytes / BYTES_PER_GIB:.3f} GiB)")
        if sh.gather_bytes:
            caption += f"; weights include {sh.gather_bytes:,} B gathered (FSDP2: the root and the layers in use)"
        if sh.host_bytes:
            caption += (f"; host memory per rank (offloaded states): {sh.host_bytes:,} B "
                        f"({sh.host_bytes / BYTES_PER_GIB:.3f} GiB)")
    paged = est.model_states.paged_optimizer
    if paged:
        caption += (f"; {s.optimizer}: optimizer states {paged:,} B ({paged / BYTES_PER_GIB:.3f} GiB) in CUDA "
                    "unified memory, outside torch.cuda's allocated/reserved counters and not in the peak (paged "
                    "to host memory when the GPU is full; nvidia-smi shows them while resident)")
    t = Table(title=title, caption=caption)
    t.add_column("component")
    t.add_column("bytes", justify="right")
    t.add_column("GiB", justify="right")
    t.add_column("share", justify="right")
    for k, v in est.components.items():
        if v == 0:
            continue
        t.add_row(k, f"{v:,}", f"{v / BYTES_PER_GIB:.3f}", f"{v / est.peak_bytes:.1%}")
    t.add_row("[bold]peak (allocated)[/]", f"[bold]{est.peak_bytes:,}[/]",
              f"[bold]{est.peak_bytes / BYTES_PER_GIB:.3f}[/]", "100.0%")
    if s.device == "cuda":
        t.add_row("reserved (+allocator, CUDA context)", f"{est.reserved_bytes:,}",
                  f"{est.reserved_bytes / BYTES_PER_GIB:.3f}", "")
    if est.host_bytes:  # --offload: the checkpoints' copies, in host memory (not part of the peak above)
        what = "--offload-activations saved tensors" if s.offload_activations else "--offload checkpoints"
        t.add_row(f"host memory ({what})", f"{est.host_bytes:,}",
                  f"{est.host_bytes / BYTES_PER_GIB:.3f}", "")
    return t


def states_table(est: MemoryEstimate) -> Table:
    t = Table(title="model states (full sizes) and activations")
    t.add_column("item")
    t.add_column("bytes", justify="right")
    t.add_column("GiB", justify="right")
    st = est.model_states
    rows = [("weights (frozen)", st.weights_frozen), ("weights (trainable)", st.weights_trainable),
            ("gradients", st.gradients), ("optimizer states", st.optimizer),
            ("activations saved by the forward", est.activation_bytes),
            ("  of which one block", est.activations.per_layer)]
    for k, v in est.activations.by_component.items():
        rows.append((f"    {k}", v))
    for name, v in rows:
        t.add_row(name, f"{v:,}", f"{v / BYTES_PER_GIB:.3f}")
    t.add_row("trainable parameters", f"{st.trainable_params:,}", "")
    return t


def verdict(est: MemoryEstimate, target: Target | None) -> str:
    """One line: fits / does not fit ``target``, with the rule in numbers (:mod:`memfit.estimate.fits`)."""
    if target is None:
        return (f"peak {_gib(est.peak_bytes)} ({est.peak_bytes / BYTES_PER_GB:.2f} GB) at {est.peak_moment}; "
                "pass --gpu to judge the fit")
    per = " per GPU" if est.spec.gpus > 1 else ""
    return verdict_line(target.judge(est.peak_bytes, est.spec.device, reserved=est.reserved_bytes)) + per


def verdict_line(v: FitVerdict) -> str:
    """``fits: reserved 20.12 GiB + headroom 1.20 GiB (5% of the GPU) = 21.32 GiB <= 24.00 GiB (24GiB),
    2.68 GiB spare``: the one rule of :mod:`memfit.estimate.fits`, shared by estimate, trace and fit."""
    if v.fits:
        return f"[green]fits[/]: {v.rule()}, {_gib(v.spare_bytes)} spare"
    return f"[red]does not fit[/]: {v.rule()}, short by {_gib(-v.spare_bytes)}"


def rule_of_thumb_line(est: MemoryEstimate) -> str:
    """The lesson's L*b*s*h*20 beside memfit's activations, and where the difference comes from."""
    rot, act = est.rule_of_thumb_bytes, est.activation_bytes
    s, sh, a = est.spec, est.shape, est.activations
    unit = s.batch * s.seq * sh.hidden  # one token x hidden unit
    per = a.per_layer / unit
    parts = sorted(a.by_component.items(), key=lambda kv: -kv[1])[:4]
    top = ", ".join(f"{k} {v / unit:.1f}" for k, v in parts)
    notes = [f"memfit's block keeps {per:.1f} B per token x hidden (the rule says 20): {top}"]
    if a.segment:
        notes.append(f"checkpointing keeps {a.checkpoints:,} B of block inputs instead")
    if s.loss == "standard":
        notes.append(f"the loss keeps fp32 log-probabilities b*s*V*4 = {a.loss_workspace:,} B")
    elif s.loss == "chunked":
        notes.append(f"Liger's fused loss holds one fp32 chunk of C*V*4 = {a.loss_workspace:,} B (liger-kernel "
                     "0.8.5 ops/fused_linear_cross_entropy.py; Triton, not run on CPU here: modelled)")
    else:
        notes.append(f"TRL's fused LM head scores {trl_scored_tokens(s):,} positions"
                     + (" (labels != -100 only, on CUDA)" if s.device == "cuda" else " (every one off CUDA)"))
    return (f"rule of thumb L*b*s*h*20 = {rot:,} B ({rot / BYTES_PER_GB:.2f} GB, {_gib(rot)}); memfit's saved "
            f"activations = {act:,} B ({_gib(act)}), x{act / rot:.2f}. " + "; ".join(notes))


def explain_table(est: MemoryEstimate) -> Table:
    t = Table(title="how each figure is computed")
    t.add_column("component")
    t.add_column("formula")
    t.add_column("numbers")
    t.add_column("bytes", justify="right")
    for e in explain_estimate(est):
        t.add_row(e.component, e.formula, e.numbers, f"{e.bytes:,}")
    return t


def rule_of_thumb_json(layers: int, hidden: int, batch: int, seq: int, value: int) -> dict[str, Any]:
    return {"mode": "rule-of-thumb", "layers": layers, "hidden": hidden, "batch": batch, "seq": seq,
            "bytes_per_layer_token_hidden": 20, "activation_bytes": value,
            "activation_gb": value / BYTES_PER_GB, "activation_gib": value / BYTES_PER_GIB}


def rule_of_thumb_text(layers: int, hidden: int, batch: int, seq: int, value: int) -> str:
    return (f"activations = {layers} x {batch} x {seq} x {hidden} x 20 B = {value:,} B "
            f"({value / BYTES_PER_GB:.2f} GB, {value / BYTES_PER_GIB:.2f} GiB)")


def gpus_rows() -> list[dict[str, Any]]:
    return [g.to_dict() | {"gib": g.bytes / BYTES_PER_GIB} for g in gpu_table()]


def gpus_table(rows: list[dict[str, Any]] | None = None) -> Table:
    t = Table(title="bundled GPUs (memory as the device reports it; GiB = 1024^3 B)")
    t.add_column("name")
    t.add_column("bytes", justify="right")
    t.add_column("GiB", justify="right")
    t.add_column("source")
    for r in rows or gpus_rows():
        t.add_row(r["name"], f"{r['bytes']:,}", f"{r['gib']:.2f}", r["source"])
    return t
