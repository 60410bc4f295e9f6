"""The run-spec flags, declared once and added to every command that takes a spec.

``@spec_options`` extends a command's signature with ``--method``, ``--rank`` ... ``--sharding``, ``--gpus`` and
``--config FILE`` (repeatable: the user's training configs, :mod:`memfit.configs`), and hands the command a
validated :class:`~memfit.estimate.spec.RunSpec` as ``spec``: memfit's defaults, then the config files (later
files win), then the flags given on the command line (found by click's parameter source). Commands that
sweep a flag (``measure --batch 1,2,4``) declare that flag themselves and pass ``exclude=("batch",)``; a
config's value fills it when the flag is not given. The GPU a run is judged against is not part of the run: commands
that judge one declare ``--gpu`` (:data:`GpuFlag`) and ``--headroom`` and build a
:class:`~memfit.estimate.fits.Target` with :func:`target_from_options`. A command with a ``config_import`` parameter
receives the :class:`~memfit.configs.SpecImport` (or None), for the import table and ``--json``; one whose
MODEL argument is left out gets the model the config names.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Annotated, Any

import typer

from memfit.errors import MemfitError
from memfit.estimate.fits import Target
from memfit.estimate.spec import RunSpec, parse_layers, parse_rank_pattern, parse_targets, parse_token_indices

_P = inspect.Parameter

SPEC_OPTIONS: dict[str, tuple[Any, Any]] = {
    "method": (str, typer.Option("--method", help="full | lora | qlora (4-bit NF4 base + LoRA) | int8-lora "
                                 "(LLM.int8 base + LoRA)")),
    "rank": (int, typer.Option("--rank", "-r", help="LoRA rank r")),
    "alpha": (int, typer.Option("--alpha", help="LoRA alpha")),
    "lora_dropout": (float, typer.Option("--lora-dropout", help="LoRA dropout (PEFT default 0.0)")),
    "targets": (str, typer.Option("--targets", help="LoRA targets: q_proj,v_proj,... or all-linear "
                                  "(default: PEFT's default for the architecture)")),
    "modules_to_save": (str, typer.Option("--modules-to-save", help="fully trained modules beside LoRA, "
                                          "e.g. embed_tokens,lm_head")),
    "double_quant": (bool, typer.Option("--double-quant/--no-double-quant", help="QLoRA double quantisation")),
    "exclude_modules": (str, typer.Option("--exclude-modules", help="modules PEFT leaves without an adapter "
                                          "(exclude_modules: full names or name endings), e.g. k_proj")),
    "targets_regex": (str, typer.Option("--targets-regex", help="LoRA targets as PEFT's target_modules string: a "
                                        "regular expression full-matched against module names, e.g. "
                                        "'.*\\.(q|v)_proj'")),
    "rank_pattern": (str, typer.Option("--rank-pattern", help="per-module LoRA ranks as PEFT's rank_pattern: "
                                       "NAME=RANK pairs, NAME a regular expression over module names, e.g. "
                                       "q_proj=32,mlp.down_proj=8")),
    "use_dora": (bool, typer.Option("--dora/--no-dora", help="DoRA (PEFT use_dora): a trained magnitude per "
                                    "output feature and a weight norm in every adapted linear")),
    "layers_to_transform": (str, typer.Option("--layers-to-transform", help="LoRA on these decoder layers only "
                                              "(PEFT layers_to_transform): indexes from 0 or ranges, e.g. 0,1,5 or "
                                              "0-3")),
    "layers_pattern": (str, typer.Option("--layers-pattern", help="the layer list's name the indexes follow (PEFT "
                                         "layers_pattern, e.g. layers or h; default: the first numbered name)")),
    "trainable_token_indices": (str, typer.Option("--trainable-tokens", help="token ids whose embedding rows train "
                                                  "beside LoRA (PEFT trainable_token_indices), e.g. 128000,128001")),
    "bias": (str, typer.Option("--bias", help="biases trained beside LoRA (PEFT bias): none | all (every "
                               "parameter named *.bias) | lora_only (the adapted linears' biases)")),
    "precision": (str, typer.Option("--precision", "-p", help="fp32 | bf16 | fp16 | mixed-bf16 | mixed-fp16")),
    "optimizer": (str, typer.Option("--optimizer", help="adamw | adamw-8bit | sgd | sgd-momentum | adafactor | "
                                    "paged-adamw-8bit | paged-adamw-32bit (bitsandbytes; states in CUDA unified "
                                    "memory, reported apart)")),
    "batch": (int, typer.Option("--batch", "-b", help="micro-batch size")),
    "seq": (int, typer.Option("--seq", "-s", help="sequence length in tokens")),
    "grad_accum": (int, typer.Option("--grad-accum", help="gradient accumulation steps (no effect on the peak)")),
    "checkpointing": (str, typer.Option("--checkpointing", help="none | full | every-k | sqrt")),
    "checkpoint_every": (int, typer.Option("--checkpoint-every", help="k for --checkpointing every-k")),
    "offload": (bool, typer.Option("--offload/--no-offload", help="keep checkpoints in CPU memory")),
    "attention": (str, typer.Option("--attention", help="eager | sdpa | flash")),
    "device": (str, typer.Option("--device", help="cuda | cpu")),
    "padding_mask": (bool, typer.Option("--padding-mask/--no-padding-mask",
                                        help="batches carry a padding attention mask")),
    "loss": (str, typer.Option("--loss", help="standard (fp32 logits) | chunked (Liger's fused linear cross-entropy) "
                               "| trl (TRL SFTTrainer's fused LM head, its default loss)")),
    "sharding": (str, typer.Option("--sharding", help="none | ddp | zero1 | zero2 | zero3 | fsdp | hsdp: how the model "
                                   "states are spread over --gpus (zero2 = FSDP2 reshard_after_forward=False, zero3 = "
                                   "fsdp = FULL_SHARD, hsdp shards within a node); figures are then per GPU")),
    "gpus": (int, typer.Option("--gpus", help="data-parallel GPUs (the world size); with --sharding the model "
                               "states are divided over them, and fit may shard")),
    "nodes": (int, typer.Option("--nodes", help="machines the --gpus are spread over (hsdp replicates across them)")),
    "reshard_after_forward": (bool | None, typer.Option(
        "--reshard-after-forward/--no-reshard-after-forward",
        help="FSDP2's flag (default: off for zero2, on for zero3 / fsdp / hsdp)")),
    "prefetch": (int, typer.Option("--prefetch", help="FSDP layers gathered ahead of the one computing (default 1)")),
    "cpu_offload_params": (bool, typer.Option("--offload-params/--no-offload-params",
                                          help="keep the sharded weights and gradients in host memory")),
    "cpu_offload_optimizer": (bool, typer.Option("--offload-optimizer/--no-offload-optimizer",
                                             help="keep the optimizer states and step in host memory")),
    "bucket_mb": (int, typer.Option("--bucket-mb", help="DDP gradient bucket size in MiB (torch default 25)")),
    "fsdp_wrap": (str, typer.Option("--fsdp-wrap", help="FSDP2's units: layers (each decoder layer, then the root "
                                    "holding embeddings, norm and lm_head; torchtitan) | accelerate (accelerate / the "
                                    "Trainer: + the untied embedding, + [norm, lm_head] kept gathered)")),
    "gpus_per_node": (int | None, typer.Option("--gpus-per-node", help="GPUs in one machine: --nodes becomes "
                                               "--gpus / this (default: --nodes, else 8 per node)")),
    "loss_token_share": (float, typer.Option("--loss-token-share", help="share of positions whose label is not "
                                             "-100 (completion-only / assistant-only loss); with --loss trl on CUDA "
                                             "TRL scores only those")),
    "eval_batch": (int | None, typer.Option("--eval-batch", help="evaluation micro-batch (per_device_eval_batch_size): "
                                            "the peak then covers the evaluation steps too")),
    "eval_metrics": (bool, typer.Option("--eval-metrics/--no-eval-metrics", help="a compute_metrics is passed: "
                                        "the Trainer keeps every eval step's logits on the GPU")),
    "prediction_loss_only": (bool, typer.Option("--prediction-loss-only/--no-prediction-loss-only",
                                                help="TrainingArguments.prediction_loss_only: no logits kept")),
    "eval_accumulation_steps": (int | None, typer.Option("--eval-accumulation-steps", help="kept logits move to "
                                                         "the CPU every N eval steps (default: at the end)")),
    "eval_samples": (int | None, typer.Option("--eval-samples", help="examples in the eval set (for --eval-metrics "
                                              "without --eval-accumulation-steps)")),
    "adamw_impl": (str, typer.Option("--adamw-impl", help="fused (the Trainer's default adamw_torch_fused) | "
                                     "foreach (adamw_torch on CUDA) | forloop: torch AdamW's kernel, and so its "
                                     "step's temporaries")),
    "offload_activations": (bool, typer.Option(
        "--offload-activations/--no-offload-activations",
        help="TRL's activation_offloading (OffloadActivations): every saved tensor of >= 1024 B but lm_head's and the "
             "parameters to CPU memory, with or without checkpointing (--offload: only the checkpoints)")),
    "alloc_conf": (str, typer.Option("--alloc-conf", help="the run's PYTORCH_CUDA_ALLOC_CONF, e.g. "
                                     "expandable_segments:True or max_split_size_mb:256: the CUDA caching "
                                     "allocator replay behind the reserved figure honours it")),
}

# Flags that act only in some runs: given explicitly anywhere else, they would be silently ignored, so the
# command refuses them (the spec cannot tell "--rank 16" from the default 16; the command line can).
ONLY_WITH: dict[str, tuple[Callable[[RunSpec], bool], str]] = {
    "rank": (lambda s: s.is_adapter, "--rank is the LoRA rank; --method full trains every weight and has no rank: "
             "drop --rank or pass --method lora"),
    "alpha": (lambda s: s.is_adapter, "--alpha is LoRA's scale; --method full has no adapter: drop --alpha or pass "
              "--method lora"),
    "lora_dropout": (lambda s: s.is_adapter, "--lora-dropout applies to the LoRA adapter; --method full has none: "
                     "drop it or pass --method lora"),
    "targets": (lambda s: s.is_adapter, "--targets chooses LoRA's adapted modules; --method full trains every "
                "weight: drop --targets or pass --method lora"),
    "modules_to_save": (lambda s: s.is_adapter, "--modules-to-save lists modules trained in full beside LoRA; "
                        "--method full trains every module already: drop it or pass --method lora"),
    "exclude_modules": (lambda s: s.is_adapter, "--exclude-modules narrows LoRA's targets; --method full trains "
                        "every weight: drop it or pass --method lora"),
    "targets_regex": (lambda s: s.is_adapter, "--targets-regex chooses LoRA's adapted modules; --method full trains "
                      "every weight: drop it or pass --method lora"),
    "rank_pattern": (lambda s: s.is_adapter, "--rank-pattern sets LoRA ranks; --method full has no adapter: drop "
                     "it or pass --method lora"),
    "alloc_conf": (lambda s: s.device == "cuda", "--alloc-conf sets the CUDA caching allocator; --device cpu has "
                   "none: drop it or pass --device cuda"),
    "use_dora": (lambda s: s.is_adapter, "--dora decomposes LoRA's update (PEFT use_dora); --method full has no "
                 "adapter: drop --dora or pass --method lora"),
    "layers_to_transform": (lambda s: s.is_adapter, "--layers-to-transform chooses the layers LoRA adapts; "
                            "--method full trains every weight: drop it or pass --method lora"),
    "layers_pattern": (lambda s: s.is_adapter, "--layers-pattern names the layers LoRA adapts; --method full has no "
                       "adapter: drop it or pass --method lora"),
    "trainable_token_indices": (lambda s: s.is_adapter, "--trainable-tokens trains embedding rows beside LoRA; "
                                "--method full trains the whole embedding: drop it or pass --method lora"),
    "bias": (lambda s: s.is_adapter, "--bias chooses the biases trained beside LoRA; --method full trains every "
             "bias already: drop it or pass --method lora"),
    "double_quant": (lambda s: s.method == "qlora", "--double-quant/--no-double-quant sets QLoRA's 4-bit base; "
                     "it does nothing without --method qlora"),
    "checkpoint_every": (lambda s: s.checkpointing == "every-k", "--checkpoint-every is k of --checkpointing "
                         "every-k; with any other --checkpointing it does nothing: add --checkpointing every-k "
                         "or drop it"),
    "loss_token_share": (lambda s: s.loss == "trl", "--loss-token-share sizes TRL's fused LM head, which scores "
                         "only the positions whose label is not -100; add --loss trl or drop it"),
    **{name: (lambda s: s.eval_batch is not None, f"--{name.replace('_', '-')} describes the evaluation; add "
              "--eval-batch N (per_device_eval_batch_size) to model it, or drop the flag")
       for name in ("eval_metrics", "prediction_loss_only", "eval_accumulation_steps", "eval_samples")},
    "reshard_after_forward": (lambda s: s.sharding in _FSDP, "--reshard-after-forward is FSDP's flag: it needs "
                              "--sharding fsdp, hsdp, zero2 or zero3"),
    "prefetch": (lambda s: s.sharding in _FSDP, "--prefetch counts FSDP's gathered layers: it needs --sharding fsdp, "
                 "hsdp, zero2 or zero3"),
    "cpu_offload_params": (lambda s: s.sharding in ("zero3", "fsdp", "hsdp"), "--offload-params keeps sharded "
                           "weights on the host: it needs --sharding fsdp, hsdp or zero3"),
    "cpu_offload_optimizer": (lambda s: s.sharding not in ("none", "ddp"), "--offload-optimizer offloads the sharded "
                          "optimizer states: it needs --sharding zero1, zero2, zero3, fsdp or hsdp"),
    "bucket_mb": (lambda s: s.sharding in ("ddp", "zero1"), "--bucket-mb is DDP's bucket size: it needs --sharding "
                  "ddp or zero1"),
    "fsdp_wrap": (lambda s: s.sharding in _FSDP, "--fsdp-wrap picks FSDP2's units: it needs --sharding fsdp, hsdp, "
                  "zero2 or zero3"),
    "adamw_impl": (lambda s: s.optimizer == "adamw", "--adamw-impl picks torch AdamW's kernel; it does nothing "
                   "with another --optimizer: drop it or pass --optimizer adamw"),
}
# which spec field decides whether each flag above acts (a command that declares that field itself, such
# as measure's --checkpointing both, checks the flag on its own)
_DECIDED_BY = {"double_quant": "method", "checkpoint_every": "checkpointing", "adamw_impl": "optimizer"}
_FSDP = ("zero2", "zero3", "fsdp", "hsdp")

# Upper limits of the run's integer flags, checked where every command receives its spec (flags and --config
# alike), as SIZE_LIMITS bounds a config.json (memfit.estimate.shape): past them no real run exists and the
# estimate's figures stop meaning anything (--rank 10**29 estimated a peak of 6.9e25 GiB). RunSpec checks >= 1.
RUN_LIMITS: dict[str, tuple[int, str]] = {
    "batch": (1_048_576, "micro-batches of real runs stay in the hundreds"),
    "seq": (67_108_864, "as config.json positions: the longest-context models have ~10M"),
    "grad_accum": (1_048_576, "accumulation of real runs stays in the thousands"),
    "rank": (65_536, "LoRA ranks of real runs stay at or below 1,024"),
    "alpha": (1_048_576, "LoRA alphas of real runs are a small multiple of the rank"),
    "checkpoint_every": (1_024, "a model has at most 1,024 layers (memfit's config limit)"),
    "eval_batch": (1_048_576, "as --batch"),
    "eval_accumulation_steps": (1_048_576, "as --grad-accum"),
    "eval_samples": (1 << 40, "no eval set has a trillion examples"),
    "gpus": (1_048_576, "the largest clusters have ~10^5 GPUs"),
    "prefetch": (1_024, "a model has at most 1,024 layers"),
    "bucket_mb": (1_048_576, "a bucket of 1 TiB is past any GPU"),
    "gpus_per_node": (1_024, "the largest machines hold tens of GPUs"),
}

_DEFAULTS = RunSpec()
CONFIG_OPTION = typer.Option(
    "--config", help="a training config to read the run from (repeatable; later files and explicit flags win): "
    "axolotl / LLaMA-Factory / TRL / torchtune YAML, TrainingArguments, PEFT adapter_config.json, DeepSpeed "
    "JSON, accelerate YAML; KIND:FILE names the kind")

_CTX = "memfit_context"

HeadroomFlag = Annotated[str | None, typer.Option(
    "--headroom", help="memory kept free on top of what the step reserves: a share of the GPU (5%, 0.05) or a "
    "size (2GiB); default 5%. Fits = reserved (peak + allocator + CUDA context) + headroom <= the GPU")]
CheckFlag = Annotated[bool, typer.Option(
    "--check", help="exit code 3 when the run does not fit (0 when it fits), for launch scripts; needs --gpu")]
GpuFlag = Annotated[str | None, typer.Option(
    "--gpu", help="a GPU name (memfit gpus) or a size with its unit: 24GiB (1024^3 B, as nvidia-smi counts), "
    "80GB (10^9 B); a bare number such as 24 is refused")]
EXIT_DOES_NOT_FIT = 3  # documented in README (exit codes)


def target_from_options(gpu: str | None, headroom: str | None, *, check: bool = False) -> Target | None:
    """The :class:`Target` of ``--gpu`` and ``--headroom`` (None without ``--gpu``); ``--check`` and
    ``--headroom`` judge a fit, so they need ``--gpu``."""
    if gpu is None:
        if check or headroom is not None:
            raise MemfitError(f"{'--check' if check else '--headroom'} judges the fit on a GPU: add --gpu (a name "
                              "from memfit gpus, or a size such as 24GiB)")
        return None
    return Target.resolve(gpu, headroom)



def explicit_names(ctx: typer.Context | None, names: list[str]) -> set[str]:
    """The parameters given on the command line (or by environment), not left at their defaults; all of them
    when there is no context (the command called from Python)."""
    if ctx is None:
        return set(names)
    out = set()
    for name in names:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.add(name)
    return out


def _is_argument(p: inspect.Parameter) -> bool:
    if isinstance(p.default, typer.models.ArgumentInfo):
        return True
    return any(isinstance(m, typer.models.ArgumentInfo) for m in getattr(p.annotation, "__metadata__", ()))


def spec_from_options(values: dict[str, Any], base: RunSpec | None = None) -> RunSpec:
    """Build a RunSpec from CLI values (strings for the tuple fields)."""
    fields = {}
    for name, value in values.items():
        if name in ("targets", "modules_to_save", "exclude_modules"):
            value = parse_targets(value) if isinstance(value, str) else tuple(value or ())
        elif name == "rank_pattern":
            value = parse_rank_pattern(value)
        elif name == "trainable_token_indices":
            value = parse_token_indices(value)
        elif name == "layers_to_transform":
            value = parse_layers(value)
        elif name == "layers_pattern":
            value = parse_targets(value, flag="--layers-pattern") if isinstance(value, str) else tuple(value or ())
        fields[name] = value
    return (base or _DEFAULTS).with_(**fields)


_EXPLICIT: ContextVar[frozenset[str]] = ContextVar("memfit_explicit_flags", default=frozenset())


def _given(ctx: Any) -> frozenset[str]:
    """The command's parameters the user typed (or set in the environment), not defaults: the context's
    ``get_parameter_source`` (typer 0.29 vendors click 8's; ParameterSource COMMANDLINE / ENVIRONMENT)."""
    out = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            out.add(name)
    return frozenset(out)


def explicit_flags(names: Iterable[str]) -> set[str]:
    """The parameters among ``names`` that the user gave on the command line in the running command
    (set by :func:`spec_options`); empty outside one."""
    return set(names) & _EXPLICIT.get()


def check_run_limits(spec: RunSpec) -> None:
    """A MemfitError for an integer setting past :data:`RUN_LIMITS` (from a flag or a config file)."""
    for name, (limit, why) in RUN_LIMITS.items():
        value = getattr(spec, name)
        if isinstance(value, int) and value > limit:
            flag = "--" + name.replace("_", "-")
            raise MemfitError(f"{flag} {value:,} is past memfit's limit of {limit:,} ({why})",
                              hint=f"check {flag} (or the config field it came from)")


def refuse_ignored_flags(spec: RunSpec, explicit: set[str], *, skip: Iterable[str] = ()) -> None:
    """A MemfitError for the first flag in ``explicit`` that ``spec`` would ignore (:data:`ONLY_WITH`)."""
    skipped = set(skip)
    if {"nodes", "gpus_per_node"} <= explicit:
        raise MemfitError("--nodes and --gpus-per-node both say how many machines the --gpus span: pass one "
                          "(--gpus-per-node G makes --nodes = --gpus / G)")
    for name, (acts, message) in ONLY_WITH.items():
        if name in explicit and name not in skipped and not acts(spec):
            raise MemfitError(message)


def spec_options(exclude: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: add the spec flags and ``--config`` to a typer command and pass ``spec=RunSpec(...)``."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        # resolve string annotations (``from __future__ import annotations``) so typer sees the real types
        hints = typing.get_type_hints(fn, include_extras=True)
        own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
               if p.name not in ("spec", "config_import")]
        wants_import = "config_import" in sig.parameters
        added = []
        for name, (typ, option) in SPEC_OPTIONS.items():
            if name in exclude:
                continue
            default = getattr(_DEFAULTS, name)
            if name in ("targets", "modules_to_save", "exclude_modules", "rank_pattern", "layers_to_transform",
                        "layers_pattern", "trainable_token_indices"):
                default, typ = None, str | None
            added.append(_P(name, _P.KEYWORD_ONLY, default=default, annotation=Annotated[typ, option]))
        added.append(_P("config", _P.KEYWORD_ONLY, default=None, annotation=Annotated[list[str] | None, CONFIG_OPTION]))
        context = _P(_CTX, _P.KEYWORD_ONLY, default=None, annotation=typer.Context)  # typer injects it
        own_names = {p.name for p in own}

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = kwargs.pop(_CTX, None)
            # typer hands the (vendored) click context itself, not always a typer.Context instance
            token = _EXPLICIT.set(_given(ctx) if hasattr(ctx, "get_parameter_source") else frozenset())
            try:
                return _run(fn, args, kwargs, ctx)
            finally:
                _EXPLICIT.reset(token)

        def _run(fn: Callable[..., Any], args: Any, kwargs: dict[str, Any], ctx: Any) -> Any:
            values = {p.name: kwargs.pop(p.name) for p in added if p.name in kwargs}
            configs = values.pop("config", None)
            # a flag whose deciding field the command declares itself is the command's to check
            skip = [n for n, field in _DECIDED_BY.items() if field in exclude]
            explicit = explicit_flags(values)
            if not configs:
                spec = spec_from_options(values)
                check_run_limits(spec)
                refuse_ignored_flags(spec, explicit, skip=skip)
                kwargs["spec"] = _with_environment(spec, explicit, kwargs)
                if wants_import:
                    kwargs["config_import"] = None
                return fn(*args, **kwargs)
            given = explicit_names(ctx, list(values) + [n for n in exclude if n in own_names])
            si = _import(configs, values, given, kwargs.get("model"))
            check_run_limits(si.spec)
            refuse_ignored_flags(si.spec, explicit, skip=skip)
            kwargs["spec"] = _with_environment(si.spec, explicit, kwargs)
            if "model" in own_names and not kwargs.get("model") and si.model:
                kwargs["model"] = si.model
            for name in exclude:  # a command's own sweep option (measure --batch): the config fills it
                if name in own_names and name not in given and name in si.applied:
                    kwargs[name] = str(si.applied[name])
            if wants_import:
                kwargs["config_import"] = si
            return fn(*args, **kwargs)

        params = [p.replace(kind=_P.KEYWORD_ONLY)
                  if p.kind == _P.POSITIONAL_OR_KEYWORD and p.default is not _P.empty and not _is_argument(p)
                  else p for p in own]
        positional = [p for p in params if p.kind != _P.KEYWORD_ONLY]
        keyword = [p for p in params if p.kind == _P.KEYWORD_ONLY]
        wrapper.__signature__ = sig.replace(parameters=positional + keyword + added + [context])  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _with_environment(spec: RunSpec, explicit: set[str], kwargs: dict[str, Any]) -> RunSpec:
    """``spec`` with the settings read from the environment (:mod:`memfit.cli._alloc_env`), said on stderr
    under ``--json`` and on stdout otherwise."""
    from memfit.cli._alloc_env import alloc_conf_from_environment
    from memfit.report import console, err_console

    spec, note = alloc_conf_from_environment(spec, explicit)
    if note is not None:
        (err_console if kwargs.get("json_out") else console).print(note, highlight=False, markup=False)
    return spec


def _import(configs: list[str], values: dict[str, Any], given: set[str], model: str | None) -> Any:
    """Read the config files; the flags in ``given`` win over them."""
    from memfit.configs import import_configs, to_spec
    from memfit.configs.convert import model_dtype

    imported = import_configs(configs)
    cli = spec_from_options({k: v for k, v in values.items() if k in given})
    explicit = {k: getattr(cli, k) for k in given if k in values}
    name = model or (imported.model.value if imported.model else None)
    dtype = model_dtype(name) if imported.settings.get("weights_dtype") == "auto" else None
    return to_spec(imported, explicit=explicit, model_dtype=dtype)
