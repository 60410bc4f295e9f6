"""``memfit demo``: what ``make demo`` runs on the bundled default."""

from __future__ import annotations

from memfit.cli._app import app
from memfit.estimate import RunSpec, Target, count_params, estimate_memory, lookup, resolve_gpu
from memfit.report import console
from memfit.report.estimate import estimate_table, rule_of_thumb_line, states_table, verdict
from memfit.report.models import params_table
from memfit.units import BYTES_PER_GIB

DEMO_MODEL = "lesson-24x2048"
DEMO_SPEC = RunSpec(method="lora", precision="bf16", batch=4, seq=2048)
DEMO_GPU = "24GiB"
SMALL_CARD = "T4"  # a row of the GPU table: the demo quotes its figures, never its own


@app.command("demo")
def demo_command() -> None:
    """The lesson's worked example: a 24-layer, 2048-wide model, LoRA in bf16 at batch 4 x seq 2048, on 24 GiB,
    then the advisor's plan for the same run on a T4 (sold as 16 GB; 15 GiB as the device reports it)."""
    shape = lookup(DEMO_MODEL).shape
    target = Target.resolve(DEMO_GPU)
    console.print(params_table(shape, count_params(shape)))
    est = estimate_memory(shape, DEMO_SPEC)
    console.print(estimate_table(est))
    console.print(states_table(est))
    console.print(rule_of_thumb_line(est), highlight=False)
    console.print(verdict(est, target), highlight=False)
    ck = estimate_memory(shape, DEMO_SPEC.with_(checkpointing="full"))
    console.print(f"with --checkpointing full: peak {ck.peak_bytes / BYTES_PER_GIB:.2f} GiB "
                  f"(activations {ck.activation_bytes / BYTES_PER_GIB:.2f} GiB instead of "
                  f"{est.activation_bytes / BYTES_PER_GIB:.2f} GiB); " + verdict(ck, target), highlight=False)
    from memfit.advise import fit
    from memfit.report.fit import fit_table

    console.print(f"\n[bold]{small_card_heading()}[/]")
    console.print(fit_table(fit(shape, DEMO_SPEC, Target.resolve(SMALL_CARD))))


def small_card_heading() -> str:
    """The heading of the demo's second part, in the GPU table's own figures (``memfit gpus``)."""
    g = resolve_gpu(SMALL_CARD)
    return (f"The same run on a {g.name} (sold as {g.datasheet}; the device reports {g.memory} = "
            f"{g.bytes / BYTES_PER_GIB:.2f} GiB): memfit fit")
