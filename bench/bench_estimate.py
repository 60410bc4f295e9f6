"""Benchmark of ``memfit estimate``: time per estimate, and agreement with real CPU training steps.

    .venv/bin/python bench/bench_estimate.py            # timing + agreement matrix, rewrites ## estimate
    .venv/bin/python bench/bench_estimate.py --quick    # timing + 4 agreement rows

Agreement rows run two real training steps of tiny configs (2 layers, real head ratios and vocabularies
scaled down) with :func:`memfit.validate.steps.real_steps` (memfit's runtime: builder, step, live-storage
tracker, peak over both steps) and compare with ``estimate_memory(shape, spec)`` on ``device="cpu"``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from _results import write_section as write_results_section  # bench/_results.py

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from memfit.estimate import REGISTRY, ModelShape, RunSpec, estimate_memory, lookup  # noqa: E402


def _config(model_type: str, *, layers: int = 2, hidden: int = 128, heads: int, kv_heads: int | None = None,
            intermediate: int | None = None, vocab: int, **extra: Any) -> dict[str, Any]:
    """A config of ``model_type`` under the keys its config class reads (the registry's ConfigKeys)."""
    keys = REGISTRY[model_type].keys.write(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                                           intermediate=intermediate, vocab=vocab, positions=1024)
    return {"model_type": model_type, **keys, **extra}


ARCH: dict[str, dict[str, Any]] = {
    "llama": _config("llama", heads=8, kv_heads=2, intermediate=448, vocab=32000, tie_word_embeddings=False),
    "llama-deep": _config("llama", layers=4, hidden=64, heads=4, kv_heads=2, intermediate=176, vocab=256),
    "qwen2": _config("qwen2", heads=8, kv_heads=1, intermediate=704, vocab=151936, tie_word_embeddings=True,
                     use_sliding_window=False),
    "gemma2": _config("gemma2", heads=4, kv_heads=2, intermediate=512, vocab=32000, head_dim=64,
                      hidden_activation="gelu_pytorch_tanh", attn_logit_softcapping=50.0,
                      final_logit_softcapping=30.0),
    "phi3": _config("phi3", heads=8, kv_heads=8, intermediate=352, vocab=32064, pad_token_id=0),
    "gpt2": _config("gpt2", heads=4, vocab=50257, activation_function="gelu_new"),
    "gpt_neox": _config("gpt_neox", heads=4, intermediate=512, vocab=50277, rotary_pct=0.25,
                        use_parallel_residual=True, hidden_act="gelu"),
    "mixtral": _config("mixtral", heads=8, kv_heads=2, intermediate=224, vocab=32000, num_local_experts=4,
                       num_experts_per_tok=2),
}

ROWS: list[tuple[str, dict[str, Any]]] = [
    ("llama", {"method": "lora", "precision": "bf16", "attention": "sdpa"}),
    ("llama", {"method": "full", "precision": "fp32", "attention": "sdpa"}),
    ("llama", {"method": "full", "precision": "mixed-bf16", "attention": "eager"}),
    ("llama", {"method": "lora", "precision": "mixed-bf16", "targets": ("all-linear",)}),
    ("llama", {"method": "lora", "precision": "bf16", "checkpointing": "full"}),
    ("llama", {"method": "lora", "precision": "bf16", "seq": 256, "batch": 1}),
    ("qwen2", {"method": "lora", "precision": "bf16", "targets": ("all-linear",)}),
    ("qwen2", {"method": "full", "precision": "mixed-bf16"}),
    ("gemma2", {"method": "full", "precision": "bf16", "attention": "eager"}),
    ("gemma2", {"method": "lora", "precision": "mixed-bf16", "attention": "eager"}),
    ("gemma2", {"method": "lora", "precision": "bf16", "attention": "eager", "checkpointing": "full"}),
    ("phi3", {"method": "lora", "precision": "mixed-bf16", "targets": ("all-linear",)}),
    ("phi3", {"method": "full", "precision": "fp32", "attention": "eager"}),
    ("gpt2", {"method": "full", "precision": "bf16", "attention": "eager"}),
    ("gpt2", {"method": "lora", "precision": "mixed-bf16", "targets": ("all-linear",)}),
    ("gpt2", {"method": "full", "precision": "fp32", "checkpointing": "full"}),
    ("gpt_neox", {"method": "lora", "precision": "bf16"}),
    ("gpt_neox", {"method": "full", "precision": "mixed-bf16", "attention": "eager"}),
    ("gpt_neox", {"method": "lora", "precision": "fp32", "checkpointing": "full"}),
    ("mixtral", {"method": "lora", "precision": "bf16", "targets": ("q_proj", "v_proj")}),
    ("mixtral", {"method": "full", "precision": "bf16"}),
    ("mixtral", {"method": "lora", "precision": "mixed-bf16", "targets": ("q_proj", "k_proj", "v_proj", "o_proj")}),
    ("qwen2", {"method": "lora", "precision": "bf16", "batch": 1, "seq": 256, "attention": "eager"}),
    ("gpt_neox", {"method": "full", "precision": "fp32", "batch": 1, "seq": 256}),
    # deep-and-narrow with a small vocabulary: activations dominate, the peak moves into the blocks' backward
    ("llama-deep", {"method": "full", "precision": "fp32", "attention": "eager", "batch": 4, "seq": 256}),
    ("llama-deep", {"method": "lora", "precision": "fp32", "checkpointing": "full", "attention": "eager",
                    "batch": 4, "seq": 256}),
    ("llama-deep", {"method": "full", "precision": "fp32", "checkpointing": "full", "batch": 4, "seq": 256}),
    ("llama-deep", {"method": "lora", "precision": "bf16", "padding_mask": True, "batch": 4, "seq": 256}),
]


def time_estimates() -> list[tuple[str, str, float, float]]:
    out = []
    cases = [("llama-3.1-8b", RunSpec(batch=4, seq=2048)),
             ("llama-3.1-70b", RunSpec(method="qlora", checkpointing="full")),
             ("mixtral-8x7b", RunSpec(method="full", precision="mixed-bf16")),
             ("gpt2", RunSpec(method="full", attention="eager", seq=1024)),
             ("gemma-2-9b", RunSpec(attention="eager", targets=("all-linear",)))]
    for name, spec in cases:
        shape = lookup(name).shape
        estimate_memory(shape, spec)
        runs = []
        for _ in range(5):
            n = 200
            t = time.perf_counter()
            for _ in range(n):
                estimate_memory(shape, spec)
            runs.append((time.perf_counter() - t) / n * 1000)
        desc = (f"{spec.method}, {spec.precision}, b{spec.batch} s{spec.seq}, {spec.attention}, "
                f"ckpt {spec.checkpointing}")
        replays = []  # + the CUDA reserved figure: the caching-allocator replay, run on first use
        for _ in range(5):
            n = 5
            t = time.perf_counter()
            for _ in range(n):
                _ = estimate_memory(shape, spec).reserved_bytes
            replays.append((time.perf_counter() - t) / n * 1000)
        out.append((name, desc, statistics.median(runs), statistics.median(replays)))
    return out


def agreement(rows: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    from memfit.validate.steps import real_steps, without_dropout

    out = []
    for arch, kw in rows:
        kw = dict(kw)
        spec = RunSpec(device="cpu", batch=kw.pop("batch", 2), seq=kw.pop("seq", 32), **kw)
        cfg = without_dropout(ARCH[arch])  # this table has always been dropout-free (the dropout rows: agreement.py)
        est = estimate_memory(ModelShape.from_hf_config(cfg, name=arch), spec)
        t = time.perf_counter()
        m = real_steps(cfg, spec, steps=2)
        secs = time.perf_counter() - t
        shape = ModelShape.from_hf_config(cfg)
        states = est.model_states
        baseline = states.weights_frozen + states.weights_trainable + states.gradients + states.optimizer
        out.append({
            "arch": arch, "spec": spec, "measured": m.peak_bytes, "measured_phase": m.peak_phase,
            "estimate": est.peak_bytes, "phase": est.peak_moment, "saved": m.saved_bytes,
            "est_saved": est.activation_bytes,
            "err": (est.peak_bytes - m.peak_bytes) / m.peak_bytes,
            "rot_err": (baseline + est.rule_of_thumb_bytes - m.peak_bytes) / m.peak_bytes,
            "base_err": (baseline - m.peak_bytes) / m.peak_bytes,
            "const": (m.saved_bytes - est.activations.loss) / (shape.n_layers * spec.batch * spec.seq * shape.hidden),
            "seconds": secs,
        })
        r = out[-1]
        print(f"{arch:8s} {spec.method:5s} {spec.precision:10s} {spec.attention:5s} ck={spec.checkpointing:4s} "
              f"b{spec.batch} s{spec.seq}: measured {r['measured']:>12,} estimate {r['estimate']:>12,} "
              f"({r['err']:+.2%})  {secs:.1f}s", flush=True)
    return out


def render(times: list[tuple[str, str, float, float]], rows: list[dict[str, Any]]) -> str:
    lines = ["## estimate", "",
             "`memfit estimate` (`.venv/bin/python bench/bench_estimate.py`), 2 shared CPU cores.", "",
             "### Time per estimate (median of 5 x 200 calls, pure Python)", "",
             "The CUDA reserved figure is the caching-allocator replay of the estimate's allocation sequence "
             "(`memfit.estimate.allocator`), run on first use of `reserved_bytes` (median of 5 x 5 calls); "
             "`memfit fit` replays only the runs whose peak + the CUDA context already fits.", "",
             "| model | spec | ms per estimate | ms with the reserved figure (replay) |", "|---|---|---:|---:|"]
    for name, desc, ms, replay_ms in times:
        lines.append(f"| {name} | {desc} | {ms:.2f} | {replay_ms:.1f} |")
    if rows:
        errs = sorted(abs(r["err"]) for r in rows)
        lines += ["", "### Estimate vs a real CPU training step (peak of live storage bytes over 2 steps)", "",
                  f"{len(rows)} rows, {len({r['arch'] for r in rows})} architectures, 2 layers each with real "
                  "head ratios and real vocabulary sizes; hidden 128. Measured with memfit's runtime "
                  "(`memfit.validate.steps.real_steps`: the builder and step of `memfit measure`, the "
                  "live-storage tracker, each storage once). "
                  f"**median |error| {statistics.median(errs):.3%}, max |error| {max(errs):.3%}**. "
                  "`rule of thumb` = model states + L*b*s*h*20; `baseline` = model states only (no "
                  "activations); `B/(L*tok*h)` = measured saved-for-backward bytes (loss excluded) per layer, "
                  "token and hidden unit, the lesson's constant (20).", "",
                  "| arch | method | precision | attention | ckpt | b x s | measured | estimate | error | phase "
                  "(measured / estimated) | rule of thumb err | baseline err | B/(L*tok*h) |",
                  "|---|---|---|---|---|---|---:|---:|---:|---|---:|---:|---:|"]
        for r in rows:
            s = r["spec"]
            tg = f" {','.join(s.targets)}" if s.targets else ""
            lines.append(f"| {r['arch']} | {s.method}{tg} | {s.precision} | {s.attention} | {s.checkpointing} | "
                         f"{s.batch} x {s.seq} | {r['measured']:,} | {r['estimate']:,} | {r['err']:+.2%} | "
                         f"{r['measured_phase']} / {r['phase']} | {r['rot_err']:+.1%} | {r['base_err']:+.1%} | "
                         f"{r['const']:.1f} |")
        lines += ["", "Reading the table:", "", NOTES]
    return "\n".join(lines) + "\n"


NOTES = """- Where the loss is the peak (every row with a real vocabulary) the estimate matches to within a few kB:
  the op-by-op model reproduces the saved-for-backward bytes exactly (checked tensor by tensor against
  `torch.autograd.graph.saved_tensors_hooks`), including the fp32 RMSNorm copies, PEFT's fp32 copy of
  each adapted linear's input, autocast's bf16 copies of frozen weights, fused qkv / gate_up storages
  kept whole by a saved view, GPT-2's Python gelu_new (4 saved tensors), relu saving its output, the
  CPU sdpa kernel's (q, k, v, out, logsumexp) and the (b, 1, s, s) mask a padding mask adds.
- `phase` differs in three full fine-tuning rows where the end of backward and the optimizer step hold
  the same bytes to within a few hundred (a tie, not an error).
- What remains off: when a block's backward is the peak (llama-deep rows: small vocabulary, seq 256,
  eager attention or checkpointing) the reverse replay of the block's ops is within 1.5% (it does not
  model every temporary inside bmm/softmax backward, or the exact order in which the recompute frees).
  Mixtral under autocast with LoRA runs transformers' eager per-expert loop (grouped_mm takes bf16 only),
  which keeps a bf16 copy of each expert's weights that receives tokens and the source of every
  `index_add_`; the estimate counts both (it was 1.63% low while it counted one weight copy).
- `B/(L*tok*h)` is the measured saved bytes per layer x token x hidden; at 64 tokens per step the
  weight-sized terms (autocast's bf16 weight copies under `mixed-bf16`, the fp32 log-softmax) dominate,
  so the column is only comparable with the lesson's 20 for the long-sequence rows (43.6 for Llama LoRA
  bf16 at 1 x 256: the fp32 RMSNorm copies and PEFT's fp32 input copies alone are 8 + 8 B).
- Not measurable on this CPU box and modelled from documentation: CUDA kernels (flash / efficient sdpa,
  foreach AdamW temporaries, fp32 LayerNorm statistics), QLoRA (bitsandbytes NF4 = 0.5 B + absmax),
  adamw-8bit, `--offload`. Adafactor (transformers', the Trainer's) runs on CPU: its rows are in the
  agreement section. `tests/estimate/test_agreement_cuda.py` checks four rows against
  `torch.cuda.max_memory_allocated` when a GPU is present (it has not run yet: no GPU was lent)."""


def write_section(text: str) -> None:
    """``text`` starts with its ``## estimate`` heading."""
    write_results_section("estimate", text.split("\n", 1)[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    times = time_estimates()
    for name, desc, ms, replay_ms in times:
        print(f"{name:16s} {desc:60s} {ms:.2f} ms, {replay_ms:.1f} ms with the reserved figure")
    rows = agreement(ROWS[:4] if args.quick else ROWS)
    text = render(times, rows)
    if not args.no_write:
        write_section(text)
    print(text)


if __name__ == "__main__":
    main()
