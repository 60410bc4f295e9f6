"""Regenerate ``src/memfit/configs/schemas/*.json``: the field names, types and defaults of each training
framework's config, read from the framework's own source (never guessed).

The sources are downloaded, not installed (they are not memfit dependencies)::

    pip download --no-deps --python-version 3.12 --only-binary=:all: -d /tmp/src \
        axolotl==0.21.0 llamafactory==0.9.5 trl==1.16.0 torchtune==0.6.1 accelerate==1.15.0
    pip download --no-deps --no-binary=:all: -d /tmp/src deepspeed==0.19.8
    pip download --no-deps --only-binary=:all: -d /tmp/src transformers==5.6.0   # LLaMA-Factory's newest
    (cd /tmp/src && for f in *.whl; do d=${f%%-py3*}; mkdir -p $d && (cd $d && unzip -qo ../$f); done
     && tar xzf deepspeed-0.19.8.tar.gz)
    python tools/config_schemas.py --src /tmp/src --site .venv/lib/python3.11/site-packages

transformers (5.24.0) and peft (0.21.2) are read from the installed packages (``--site``); LLaMA-Factory 0.9.5
pins transformers <= 5.6.0, so its TrainingArguments fields come from the 5.6.0 wheel. Each field is
recorded with its annotation as written in the source, the kinds of value it takes (int, float, bool, str,
list, dict, null, any, plus literal choices), its default (a JSON literal, or ``{"expr": source}`` when the
default is computed) and the file and line it is declared at.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "src" / "memfit" / "configs" / "schemas"


class Source:
    """Every class and module-level string constant of a set of files, by name."""

    def __init__(self, root: Path, files: list[Path]):
        self.root = root
        self.classes: dict[str, tuple[Path, ast.ClassDef]] = {}
        self.constants: dict[str, str] = {}
        self.trees: dict[Path, ast.Module] = {}
        for f in files:
            tree = ast.parse(f.read_text(encoding="utf-8"))
            self.trees[f] = tree
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, (f, node))
                elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                    for t in node.targets:
                        if isinstance(t, ast.Name) and isinstance(node.value.value, str):
                            # constants.py files document a key with a docstring assigned to the same name
                            # first (``X = '''...'''``), then assign the key itself: keep the key
                            old = self.constants.get(t.id)
                            if old is None or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", old):
                                self.constants[t.id] = node.value.value
                elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    pass
        self.functions: dict[str, ast.FunctionDef] = {}
        for tree in self.trees.values():
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    self.functions.setdefault(node.name, node)

    def rel(self, f: Path) -> str:
        return str(f.relative_to(self.root))

    def base_names(self, cls: ast.ClassDef) -> list[str]:
        out = []
        for b in cls.bases:
            if isinstance(b, ast.Name):
                out.append(b.id)
            elif isinstance(b, ast.Attribute):
                out.append(b.attr)
        return out

    def is_enum(self, name: str) -> bool:
        return name in self.classes and any(b.endswith("Enum") for b in self.base_names(self.classes[name][1]))

    def enum_values(self, name: str) -> list[Any]:
        _, cls = self.classes[name]
        vals = []
        for node in cls.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                vals.append(node.value.value)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple) and node.value.elts:
                vals.extend(e.value for e in node.value.elts if isinstance(e, ast.Constant))
        return vals

    def is_model(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        """A pydantic model or a dataclass declared in these sources (its value is a mapping)."""
        if name not in self.classes or name in seen:
            return False
        _, cls = self.classes[name]
        if any(isinstance(d, ast.Name) and d.id == "dataclass" or isinstance(d, ast.Call) and
               getattr(d.func, "id", "") == "dataclass" for d in cls.decorator_list):
            return True
        return any(b in ("BaseModel", "DeepSpeedConfigModel") or self.is_model(b, seen | {name})
                   for b in self.base_names(cls))


def kinds_of(node: ast.expr | None, src: Source) -> tuple[set[str], list[Any], str | None]:
    """(kinds, literal values, nested model class) of an annotation expression."""
    if node is None:
        return {"any"}, [], None
    if isinstance(node, ast.Constant):
        if node.value is None:
            return {"null"}, [], None
        if isinstance(node.value, str):  # a forward reference
            try:
                return kinds_of(ast.parse(node.value, mode="eval").body, src)
            except SyntaxError:
                return {"any"}, [], None
        return {"any"}, [], None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        a, la, ma = kinds_of(node.left, src)
        b, lb, mb = kinds_of(node.right, src)
        return a | b, la + lb, ma or mb
    if isinstance(node, ast.Name) or isinstance(node, ast.Attribute):
        name = node.id if isinstance(node, ast.Name) else node.attr
        simple = {"int": "int", "float": "float", "bool": "bool", "str": "str", "dict": "dict", "list": "list",
                  "tuple": "list", "set": "list", "Dict": "dict", "List": "list", "Tuple": "list",
                  "PositiveInt": "int", "NonNegativeInt": "int", "PositiveFloat": "float", "Path": "str"}
        if name in simple:
            return {simple[name]}, [], None
        if src.is_enum(name):
            return set(), src.enum_values(name), None
        if src.is_model(name):
            return {"dict"}, [], name
        return {"any"}, [], None
    if isinstance(node, ast.Subscript):
        head = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", "")
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "Optional":
            k, lits, m = kinds_of(args[0], src)
            return k | {"null"}, lits, m
        if head == "Union":
            out: set[str] = set()
            lits_all: list[Any] = []
            model = None
            for a in args:
                k, lits, m = kinds_of(a, src)
                out |= k
                lits_all += lits
                model = model or m
            return out, lits_all, model
        if head == "Literal":
            return set(), [a.value for a in args if isinstance(a, ast.Constant)], None
        if head == "Annotated":
            return kinds_of(args[0], src)
        if head in ("list", "List", "Sequence", "tuple", "Tuple", "set", "Set", "Iterable"):
            return {"list"}, [], None
        if head in ("dict", "Dict", "Mapping"):
            return {"dict"}, [], None
    return {"any"}, [], None


def default_of(value: ast.expr | None, text: str) -> tuple[bool, Any]:
    """(has a default, the default) of a field's assigned value (``= x``, ``field(default=x)``, ``Field(x)``)."""
    if value is None:
        return False, None
    if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) in ("field", "Field"):
        for kw in value.keywords:
            if kw.arg == "default":
                return True, literal(kw.value, text)
            if kw.arg == "default_factory":
                return True, {"expr": (ast.get_source_segment(text, kw.value) or "") + "()"}
        if value.args:
            return True, literal(value.args[0], text)
        return False, None
    return True, literal(value, text)


def literal(node: ast.expr, text: str) -> Any:
    try:
        value = ast.literal_eval(node)
        json.dumps(value)
        return value
    except (ValueError, TypeError, SyntaxError):
        return {"expr": ast.get_source_segment(text, node)}


def class_fields(src: Source, name: str, depth: int = 0) -> dict[str, dict[str, Any]]:
    """The fields of a class and of its bases found in ``src`` (a subclass's declaration wins)."""
    if name not in src.classes:
        return {}
    f, cls = src.classes[name]
    text = f.read_text(encoding="utf-8")
    out: dict[str, dict[str, Any]] = {}
    for base in reversed(src.base_names(cls)):
        out.update(class_fields(src, base, depth))
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        fname = node.target.id
        if fname.startswith("_") or fname in ("model_config",):
            continue
        ann = ast.get_source_segment(text, node.annotation) or ""
        if ann.startswith("ClassVar"):
            continue
        kinds, lits, model = kinds_of(node.annotation, src)
        has_default, default = default_of(node.value, text)
        entry: dict[str, Any] = {"type": " ".join(ann.split()), "kinds": sorted(kinds),
                                 "source": f"{src.rel(f)}:{node.lineno}"}
        if lits:
            entry["choices"] = lits
        if has_default:
            entry["default"] = default
        else:
            entry["required"] = True
        aliases = [a for a in _aliases(node.value) if a != fname]
        if aliases:
            entry["alias"] = aliases
        if model and depth < 2:
            entry["fields"] = class_fields(src, model, depth + 1)
        out[fname] = entry
    return out


def _aliases(value: ast.expr | None) -> list[str]:
    """``Field(alias="x")`` and ``Field(validation_alias=AliasChoices("x", "y"))``: other names pydantic takes."""
    out: list[str] = []
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg in ("alias", "validation_alias"):
                if isinstance(kw.value, ast.Constant):
                    out.append(str(kw.value.value))
                elif isinstance(kw.value, ast.Call):
                    out += [str(a.value) for a in kw.value.args if isinstance(a, ast.Constant)]
    return out


def with_aliases(fields: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Pydantic fields are also accepted under their alias (DeepSpeed's ``stage3_*`` names)."""
    out = dict(fields)
    for name, entry in fields.items():
        if "fields" in entry:
            entry["fields"] = with_aliases(entry["fields"])
        for alias in entry.get("alias", []):
            out.setdefault(alias, {**entry, "alias_of": name})
    return out


def write(name: str, version: str, sources: list[str], fields: dict[str, Any], **extra: Any) -> None:
    SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
    doc = {"framework": name, "version": version, "sources": sources, **extra, "fields": fields}
    path = SCHEMA_DIR / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{path}: {len(fields)} fields")


def transformers_training_args(site: Path) -> tuple[Source, dict[str, Any]]:
    files = [site / "transformers/training_args.py", site / "transformers/training_args_seq2seq.py",
             site / "transformers/trainer_utils.py", site / "transformers/debug_utils.py"]
    src = Source(site, files)
    return src, class_fields(src, "TrainingArguments")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--src", type=Path, required=True, help="folder with the unpacked framework sources")
    ap.add_argument("--site", type=Path, required=True, help="site-packages with transformers and peft")
    a = ap.parse_args()
    site, root = a.site, a.src

    # transformers TrainingArguments (the Trainer's YAML/JSON as HfArgumentParser reads it)
    tsrc, targs = transformers_training_args(site)
    # fsdp_config keys: what training_args.py / trainer.py read from it (with or without the fsdp_ prefix)
    fsdp_keys: dict[str, str] = {}
    for name in ("training_args.py", "trainer.py"):
        text = (site / "transformers" / name).read_text(encoding="utf-8")
        pattern = r'fsdp_config(?:\.get\(|\[|\.setdefault\()"([a-z_0-9]+)"|"([a-z_0-9]+)" in self\.fsdp_config'
        for m in re.finditer(pattern, text):
            key = m.group(1) or m.group(2)
            fsdp_keys.setdefault(key, f"transformers/{name}:{text[:m.start()].count(chr(10)) + 1}")
    write("transformers", "transformers 5.24.0", ["transformers/training_args.py"], targs,
          fsdp_config_keys=dict(sorted(fsdp_keys.items())))

    # TRL: SFTConfig (+ _BaseConfig + TrainingArguments), ModelConfig, ScriptArguments, DatasetMixtureConfig
    trl = root / "trl-1.16.0"
    files = [trl / "trl/trainer/sft_config.py", trl / "trl/trainer/base_config.py",
             trl / "trl/trainer/model_config.py", trl / "trl/scripts/utils.py"]
    src = Source(trl, files)
    fields = dict(targs)
    for cls in ("SFTConfig", "ModelConfig", "ScriptArguments", "DatasetMixtureConfig"):
        fields.update(class_fields(src, cls))
    write("trl", "trl 1.16.0 (on transformers 5.24.0 TrainingArguments)",
          [str(f.relative_to(trl)) for f in files] + ["transformers/training_args.py"], fields)

    # LLaMA-Factory: the five dataclasses of hparams/parser.py's _TRAIN_ARGS
    lf = root / "llamafactory-0.9.5"
    hp = lf / "llamafactory/hparams"
    files = [hp / "parser.py"] + sorted(hp.glob("*_args.py")) + [lf / "llamafactory/extras/constants.py"]
    src = Source(lf, files)
    # LLaMA-Factory 0.9.5 requires transformers <= 5.6.0: its TrainingArguments fields (warmup_ratio is still
    # there, activation_checkpointing not yet) come from that release, downloaded beside the others
    t56 = root / "transformers-5.6.0"
    _, lf_targs = transformers_training_args(t56)
    s2s = Source(t56, [t56 / "transformers/training_args_seq2seq.py"])
    fields = dict(lf_targs)
    fields.update(class_fields(s2s, "Seq2SeqTrainingArguments"))
    for cls in ("ModelArguments", "DataArguments", "TrainingArguments", "FinetuningArguments",
                "GeneratingArguments"):
        fields.update(class_fields(src, cls))
    write("llamafactory", "llamafactory 0.9.5 (on transformers 5.6.0 Seq2SeqTrainingArguments)",
          [str(f.relative_to(lf)) for f in files] + ["transformers 5.6.0 training_args(_seq2seq).py"], fields)

    # axolotl: AxolotlInputConfig and its mixins, plus the fields of each integration plugin (the class its
    # get_input_args() names); a plugin's fields count only when the config lists the plugin under plugins:
    ax = root / "axolotl-0.21.0"
    integ = sorted((ax / "axolotl/integrations").rglob("*.py"))
    main_file = ax / "axolotl/utils/schemas/config.py"
    files = [main_file] + [f for f in sorted((ax / "axolotl/utils/schemas").glob("*.py")) if f != main_file] + integ
    src = Source(ax, files)
    fields = with_aliases(class_fields(src, "AxolotlInputConfig"))
    plugins: dict[str, str] = {}
    for f in integ:
        for m in re.finditer(r'def get_input_args\(self\)[^:]*:\s*return "([\w.]+)"', f.read_text(encoding="utf-8")):
            plugin_cls = f"{f.parent.relative_to(ax).as_posix().replace('/', '.')}.{_plugin_class(f)}"
            plugins[m.group(1).rsplit(".", 1)[1]] = plugin_cls
    for cls_name, plugin_cls in sorted(plugins.items()):
        for k, v in class_fields(src, cls_name).items():
            fields.setdefault(k, {**v, "plugin": plugin_cls})
    write("axolotl", "axolotl 0.21.0", [str(f.relative_to(ax)) for f in files if "integrations" not in f.parts
                                        or f.name in ("args.py", "__init__.py", "plugin.py")], fields)

    # PEFT LoraConfig (adapter_config.json is its to_dict())
    psrc = Source(site, [site / "peft/config.py", site / "peft/tuners/lora/config.py",
                         site / "peft/utils/peft_types.py"])
    write("peft", "peft 0.21.2", ["peft/config.py", "peft/tuners/lora/config.py"], class_fields(psrc, "LoraConfig"))

    # accelerate: ClusterConfig (config_args.py); fsdp_config / deepspeed_config keys are the launcher's
    # --fsdp_* / DeepSpeed arguments (commands/launch.py), which accelerate launch reads from the file
    acc = root / "accelerate-1.15.0"
    src = Source(acc, [acc / "accelerate/commands/config/config_args.py", acc / "accelerate/utils/dataclasses.py"])
    fields = class_fields(src, "ClusterConfig")
    launch = (acc / "accelerate/commands/launch.py").read_text(encoding="utf-8")
    launch_args = re.findall(r'"--([a-z0-9_]+)"', launch)
    fsdp = sorted({x for x in launch_args if x.startswith("fsdp_")})
    ds = ["deepspeed_config_file", "zero_stage", "offload_optimizer_device", "offload_param_device",
          "offload_optimizer_nvme_path", "offload_param_nvme_path", "gradient_accumulation_steps",
          "gradient_clipping", "zero3_init_flag", "zero3_save_16bit_model", "deepspeed_hostfile",
          "deepspeed_exclusion_filter", "deepspeed_inclusion_filter", "deepspeed_multinode_launcher",
          "deepspeed_moe_layer_cls_names"]
    missing = [x for x in ds if x not in launch_args]
    assert not missing, missing
    fields["fsdp_config"]["fields"] = {k: {"type": "launch argument", "kinds": ["any"],
                                           "source": "accelerate/commands/launch.py"} for k in fsdp}
    fields["deepspeed_config"]["fields"] = {k: {"type": "launch argument", "kinds": ["any"],
                                                "source": "accelerate/commands/launch.py"} for k in ds}
    write("accelerate", "accelerate 1.15.0",
          ["accelerate/commands/config/config_args.py", "accelerate/commands/launch.py"], fields)

    # DeepSpeed: the top-level keys DeepSpeedConfig reads (runtime/config.py and the get_* helpers it calls),
    # and zero_optimization (DeepSpeedZeroConfig, pydantic, extra="forbid")
    dsr = root / "deepspeed-0.19.8"
    files = sorted((dsr / "deepspeed").rglob("*.py"))
    src = Source(dsr, files)
    keys = deepspeed_top_level_keys(src)
    zero = with_aliases(class_fields(src, "DeepSpeedZeroConfig"))
    fields = {k: {"type": "top-level key", "kinds": ["any"], "source": v} for k, v in sorted(keys.items())}
    fields["zero_optimization"] = {"type": "DeepSpeedZeroConfig", "kinds": ["dict", "bool"],
                                   "source": "deepspeed/runtime/zero/config.py", "fields": zero}
    removed = deepspeed_removed_keys(src, "_REMOVED_TOP_LEVEL_CONFIG_KEYS")
    zero_removed = deepspeed_removed_keys(src, "_REMOVED_ZERO_CONFIG_KEYS")
    fields["zero_optimization"]["removed"] = zero_removed
    write("deepspeed", "deepspeed 0.19.8", ["deepspeed/runtime/config.py", "deepspeed/runtime/zero/config.py",
                                            "deepspeed/runtime/zero/offload_config.py"], fields,
          removed=removed)

    # torchtune: top-level keys of the shipped recipe configs and the keys the recipes read; model builders
    tt = root / "torchtune-0.6.1"
    import yaml  # only here: the generator reads the shipped recipe configs

    top: dict[str, str] = {}
    for y in sorted((tt / "recipes/configs").rglob("*.yaml")):
        data = yaml.safe_load(y.read_text(encoding="utf-8")) or {}
        for k in data:
            top.setdefault(k, str(y.relative_to(tt)))
    for r in sorted((tt / "recipes").glob("*.py")):
        text = r.read_text(encoding="utf-8")
        keys = re.findall(r'\bcfg(?:\.get\(\s*"|\[")([a-z_0-9]+)"', text)
        keys += re.findall(r"\bcfg\.([a-z_][a-z_0-9]*)\b", text)
        for k in keys:
            if k not in ("get", "pop", "keys", "items", "values"):
                top.setdefault(k, str(r.relative_to(tt)))
    builders: dict[str, Any] = {}
    for b in sorted((tt / "torchtune/models").glob("*/_model_builders.py")):
        text = b.read_text(encoding="utf-8")
        tree = ast.parse(text)
        family = b.parent.name
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                args = node.args.args + node.args.kwonlyargs
                defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + list(node.args.defaults)
                defaults += list(node.args.kw_defaults)
                builders[f"torchtune.models.{family}.{node.name}"] = {
                    "args": {a.arg: (literal(d, text) if d is not None else {"required": True})
                             for a, d in zip(args, defaults, strict=True)},
                    "source": f"{b.relative_to(tt)}:{node.lineno}"}
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                v = node.value
                if isinstance(v, ast.Call) and getattr(v.func, "id", "") == "partial" and v.args:
                    base = f"torchtune.models.{family}.{v.args[0].id}"
                    builders[f"torchtune.models.{family}.{name}"] = {
                        "partial_of": base, "set": {kw.arg: literal(kw.value, text) for kw in v.keywords},
                        "source": f"{b.relative_to(tt)}:{node.lineno}"}
                elif isinstance(v, ast.Name):
                    builders[f"torchtune.models.{family}.{name}"] = {
                        "alias_of": f"torchtune.models.{family}.{v.id}", "source": f"{b.relative_to(tt)}:{node.lineno}"}
    fields = {k: {"type": "recipe key", "kinds": ["any"], "source": v} for k, v in sorted(top.items())}
    write("torchtune", "torchtune 0.6.1", ["recipes/configs/**/*.yaml", "recipes/*.py",
                                           "torchtune/models/*/_model_builders.py"], fields, builders=builders)


def deepspeed_top_level_keys(src: Source) -> dict[str, str]:
    """The keys DeepSpeedConfig reads from the top level of the config dict: every access on ``param_dict`` in
    ``DeepSpeedConfig._initialize_params`` and in the functions and classes it hands ``param_dict`` to
    (followed three calls deep, by the parameter that receives it)."""
    keys: dict[str, str] = {}
    _, cls = src.classes["DeepSpeedConfig"]
    for method in cls.body:
        if isinstance(method, ast.FunctionDef):
            for var in ("param_dict", "self._param_dict"):
                _collect(src, method, var, keys, depth=0, where="deepspeed/runtime/config.py")
    return keys


def deepspeed_removed_keys(src: Source, name: str) -> dict[str, str]:
    """``_REMOVED_TOP_LEVEL_CONFIG_KEYS`` / ``_REMOVED_ZERO_CONFIG_KEYS`` of runtime/config.py: keys that
    DeepSpeed 0.19.8 rejects, with its message."""
    for f, tree in src.trees.items():
        for node in tree.body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
                text = f.read_text(encoding="utf-8")
                out = {}
                assert isinstance(node.value, ast.Dict)
                for k, v in zip(node.value.keys, node.value.values, strict=True):
                    msg = literal(v, text)
                    out[str(literal(k, text))] = msg if isinstance(msg, str) else "removed"
                return out
    raise KeyError(name)


def _collect(src: Source, fn: ast.FunctionDef, var: str, keys: dict[str, str], depth: int, where: str) -> None:
    for node in ast.walk(fn):
        key = _param_dict_key(node, var)
        if key is not None:
            values = []
            if isinstance(key, ast.Constant):
                values = [key.value]
            elif isinstance(key, ast.Name) and key.id in src.constants:
                values = [src.constants[key.id]]
            elif isinstance(key, ast.Name) and key.id in [a.arg for a in fn.args.args]:
                # a key passed as a parameter with a default: get_communication_data_type(comm_type=CONST)
                args = fn.args.args
                defaults = [None] * (len(args) - len(fn.args.defaults)) + list(fn.args.defaults)
                d = defaults[[a.arg for a in args].index(key.id)]
                if isinstance(d, ast.Name) and d.id in src.constants:
                    values = [src.constants[d.id]]
            elif isinstance(key, ast.Name):  # for key in ("tensorboard", ...): param_dict.get(key)
                for comp in ast.walk(fn):
                    if isinstance(comp, ast.comprehension) and isinstance(comp.target, ast.Name) \
                            and comp.target.id == key.id and isinstance(comp.iter, ast.Tuple):
                        values += [e.value for e in comp.iter.elts if isinstance(e, ast.Constant)]
            for v in values:
                if isinstance(v, str) and re.fullmatch(r"[a-z][a-z0-9_]*", v):
                    keys.setdefault(v, f"{where}:{node.lineno}")
        if depth < 3 and isinstance(node, ast.Call):
            pos = [i for i, a in enumerate(node.args) if isinstance(a, ast.Name) and a.id == var]
            for i, a in enumerate(node.args):  # get_communication_data_type(param_dict, SEQ_PARALLEL_..., ...)
                if i > 0 and pos == [0] and isinstance(a, ast.Name) and a.id in src.constants \
                        and re.fullmatch(r"[a-z][a-z0-9_]*", src.constants[a.id]) and a.id.isupper() \
                        and not a.id.endswith("_DEFAULT"):
                    keys.setdefault(src.constants[a.id], f"{where}:{node.lineno}")
            if not pos:
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            target = src.functions.get(name)
            offset = 0
            if target is None and name in src.classes:
                target = next((n for n in src.classes[name][1].body
                               if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
                offset = 1
            if target is None:
                continue
            params = [a.arg for a in target.args.args][offset:]
            if pos[0] < len(params):
                f = next(p for p, t in src.trees.items() if any(n is target for n in ast.walk(t)))
                _collect(src, target, params[pos[0]], keys, depth + 1, src.rel(f))


def _plugin_class(f: Path) -> str:
    """The BasePlugin subclass declared in an integration's module (what ``plugins:`` names)."""
    for node in ast.parse(f.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", "").endswith("Plugin") for b in node.bases):
            return node.name
    return "?"


def _param_dict_key(node: ast.AST, var: str = "param_dict") -> ast.expr | None:
    """The key of ``param_dict[K]``, ``param_dict.get(K...)``, ``K in param_dict``, ``get_*_param(param_dict, K``."""
    def is_pd(n: ast.AST) -> bool:
        if var.startswith("self."):
            return isinstance(n, ast.Attribute) and n.attr == var[5:] and getattr(n.value, "id", "") == "self"
        return isinstance(n, ast.Name) and n.id == var
    if isinstance(node, ast.Subscript) and is_pd(node.value):
        return node.slice
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and is_pd(f.value) and node.args:
            return node.args[0]
        if isinstance(f, ast.Name) and f.id.startswith("get_") and f.id.endswith("_param") and len(node.args) >= 2 \
                and is_pd(node.args[0]):
            return node.args[1]
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In):
        right = node.comparators[0]
        if is_pd(right) or isinstance(right, ast.Call) and isinstance(right.func, ast.Attribute) \
                and is_pd(right.func.value):  # K in param_dict, K in param_dict.keys()
            return node.left
    return None


if __name__ == "__main__":
    main()
