"""The run-spec flags, declared once and added to every command that takes a spec.

``@spec_options`` extends a command's signature with ``--method``, ``--rank`` ... ``--gpu`` and
``--config FILE`` (repeatable: the user's training configs, :mod:`memfit.configs`), and hands the command a
validated :class:`~memfit.estimate.spec.RunSpec` as ``spec``: memfit's defaults, then the config files (later
files win), then the flags given on the command line (found by click's parameter source). Commands that
sweep a flag (``measure --batch 1,2,4``) declare that flag themselves and pass ``exclude=("batch",)``; a
config's value fills it when the flag is not given. ``consumes`` names settings RunSpec has no field for
that the command takes as its own option (``fit --gpus``). A command with a ``config_import`` parameter
receives the :class:`~memfit.configs.SpecImport` (or None), for the import table and ``--json``; one whose
MODEL argument is left out gets the model the config names.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from memfit.estimate.spec import RunSpec, parse_targets

_P = inspect.Parameter

SPEC_OPTIONS: dict[str, tuple[Any, Any]] = {
    "method": (str, typer.Option("--method", help="full | lora | qlora (4-bit NF4 base + LoRA)")),
    "rank": (int, typer.Option("--rank", "-r", help="LoRA rank r")),
    "alpha": (int, typer.Option("--alpha", help="LoRA alpha")),
    "lora_dropout": (float, typer.Option("--lora-dropout", help="LoRA dropout (PEFT default 0.0)")),
    "targets": (str, typer.Option("--targets", help="LoRA targets: q_proj,v_proj,... or all-linear "
                                  "(default: PEFT's default for the architecture)")),
    "modules_to_save": (str, typer.Option("--modules-to-save", help="fully trained modules beside LoRA, "
                                          "e.g. embed_tokens,lm_head")),
    "double_quant": (bool, typer.Option("--double-quant/--no-double-quant", help="QLoRA double quantisation")),
    "precision": (str, typer.Option("--precision", "-p", help="fp32 | bf16 | fp16 | mixed-bf16 | mixed-fp16")),
    "optimizer": (str, typer.Option("--optimizer", help="adamw | adamw-8bit | sgd | sgd-momentum | adafactor")),
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
    "loss": (str, typer.Option("--loss", help="standard (fp32 logits) | chunked (fused linear cross-entropy)")),
    "gpu": (str, typer.Option("--gpu", help="a GPU name (memfit gpus) or a size: 24GiB, 80GB")),
}

_DEFAULTS = RunSpec()
CONFIG_OPTION = typer.Option(
    "--config", help="a training config to read the run from (repeatable; later files and explicit flags win): "
    "axolotl / LLaMA-Factory / TRL / torchtune YAML, TrainingArguments, PEFT adapter_config.json, DeepSpeed "
    "JSON, accelerate YAML; KIND:FILE names the kind")


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
        if name in ("targets", "modules_to_save"):
            value = parse_targets(value) if isinstance(value, str) else tuple(value or ())
        fields[name] = value
    return (base or _DEFAULTS).with_(**fields)


def spec_options(exclude: tuple[str, ...] = (), consumes: tuple[str, ...] = ()
                 ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
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
            if name in ("targets", "modules_to_save"):
                default, typ = None, str | None
            if name == "gpu":
                typ = str | None
            added.append(_P(name, _P.KEYWORD_ONLY, default=default, annotation=Annotated[typ, option]))
        added.append(_P("config", _P.KEYWORD_ONLY, default=None, annotation=Annotated[list[str] | None, CONFIG_OPTION]))
        context = _P("memfit_ctx", _P.KEYWORD_ONLY, default=None, annotation=typer.Context)
        own_names = {p.name for p in own}

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = kwargs.pop("memfit_ctx", None)
            values = {p.name: kwargs.pop(p.name) for p in added if p.name in kwargs}
            configs = values.pop("config", None)
            if not configs:
                kwargs["spec"] = spec_from_options(values)
                if wants_import:
                    kwargs["config_import"] = None
                return fn(*args, **kwargs)
            given = explicit_names(ctx, list(values) + [n for n in (*exclude, *consumes) if n in own_names])
            si = _import(configs, values, given, consumes, kwargs.get("model"))
            kwargs["spec"] = si.spec
            if "model" in own_names and not kwargs.get("model") and si.model:
                kwargs["model"] = si.model
            for name in exclude:  # a command's own sweep option (measure --batch): the config fills it
                if name in own_names and name not in given and name in si.applied:
                    kwargs[name] = str(si.applied[name])
            for name in consumes:
                if name in own_names and name not in given and name in si.unused:
                    kwargs[name] = si.unused[name]
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


def _import(configs: list[str], values: dict[str, Any], given: set[str], consumes: tuple[str, ...],
            model: str | None) -> Any:
    """Read the config files; the flags in ``given`` win over them."""
    from memfit.configs import import_configs, to_spec
    from memfit.configs.convert import model_dtype

    imported = import_configs(configs)
    cli = spec_from_options({k: v for k, v in values.items() if k in given})
    explicit = {k: getattr(cli, k) for k in given if k in values}
    name = model or (imported.model.value if imported.model else None)
    dtype = model_dtype(name) if imported.settings.get("weights_dtype") == "auto" else None
    return to_spec(imported, explicit=explicit, accepts=consumes, model_dtype=dtype)
