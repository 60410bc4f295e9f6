"""The whole command line, fuzzed in-process (memfit.cli.main under typer's CliRunner isolation): every
command with random mixes of its options, valid and not (sizes, lists, choices, numbers out of range, paths
that do not exist or cannot be written, files that are not what they claim), with and without --json. The
property (fuzzing.assert_cli_contract): exit 0 (3 for "does not fit" under --check) with valid output, or a
non-zero exit with one short message naming the fix; never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fuzzing import SHARED, assert_cli_contract, examples, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

NEOX = str(SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json")
GSM8K = SHARED / "data" / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("cli")
    (folder / "d.jsonl").write_text("\n".join(GSM8K.read_text().splitlines()[:20]) + "\n")
    (folder / "bad.jsonl").write_bytes(b"{oops\n\xff\n")
    (folder / "empty.jsonl").write_text("")
    (folder / "text.csv").write_text("text\nhello world\nsecond row\n")
    (folder / "exists.jsonl").write_text("keep\n")
    (folder / "adir").mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 32,
                                                   "num_attention_heads": 2, "num_key_value_heads": 1,
                                                   "intermediate_size": 64, "vocab_size": 64,
                                                   "max_position_embeddings": 128}))
    (folder / "notjson.json").write_text("{nope")
    return {"dir": str(folder)}


def _p(files: dict[str, str], name: str) -> str:
    return str(Path(files["dir"]) / name)


models = st.sampled_from(["gpt2", "llama-3.1-8b", "qwen3-8b", "mixtral-8x7b", "tiny-llama", "", "{dir}/config.json",
                          "{dir}/notjson.json", "{dir}/adir", "{dir}/missing.json", "org/not-cached", "/dev/null"])
spec_flags = st.lists(st.sampled_from([
    ("--method", st.sampled_from(["full", "lora", "qlora", "LoRA", "x", ""])),
    ("--rank", st.sampled_from(["8", "0", "-1", "x", "99999999", "99999999999999999999999999999"])),
    ("--alpha", st.sampled_from(["16", "0", "x"])),
    ("--targets", st.sampled_from(["q_proj,v_proj", "all-linear", ",,,", "nonexistent", "q_proj,,v_proj"])),
    ("--modules-to-save", st.sampled_from(["embed_tokens,lm_head", "lm_head", "nope", ","])),
    ("--precision", st.sampled_from(["bf16", "fp32", "mixed-bf16", "fp8", ""])),
    ("--optimizer", st.sampled_from(["adamw", "adamw-8bit", "sgd", "adafactor", "lion"])),
    ("--batch", st.sampled_from(["1", "4", "0", "-2", "x", "100000", "10000000000"])),
    ("--seq", st.sampled_from(["128", "2048", "0", "x", "10000000", "100000000000"])),
    ("--grad-accum", st.sampled_from(["1", "8", "0"])),
    ("--checkpointing", st.sampled_from(["none", "full", "every-k", "sqrt", "both", "x"])),
    ("--checkpoint-every", st.sampled_from(["2", "0", "x"])),
    ("--attention", st.sampled_from(["eager", "sdpa", "flash", "x"])),
    ("--device", st.sampled_from(["cuda", "cpu", "tpu"])),
    ("--loss", st.sampled_from(["standard", "chunked", "x"])),
    ("--gpu", st.sampled_from(["24GiB", "80GB", "A100-80GB", "T4", "24", "0GiB", "x"])),
    ("--lora-dropout", st.sampled_from(["0.1", "1.5", "-1", "x"])),
    ("--offload", None), ("--no-offload", None), ("--padding-mask", None), ("--double-quant", None),
    ("--config", st.sampled_from(["{dir}/missing.yml", "{dir}/config.json", "axolotl:{dir}/d.jsonl"])),
]), max_size=5)


@st.composite
def argv_with(draw: st.DrawFn, command: list[str], own: list[tuple[str, Any]]) -> list[str]:
    out = list(command)
    for flag, values in draw(st.lists(st.sampled_from(own), max_size=4)) + draw(spec_flags):
        out.append(flag)
        if values is not None:
            out.append(draw(values))
    if draw(st.booleans()):
        out.append("--json")
    if draw(st.integers(0, 9)) == 0:
        out.append(draw(st.sampled_from(["--bogus", "extra-argument", "--batch"])))  # a usage error
    return out


def _run(argv: list[str], files: dict[str, str]) -> None:
    argv = [a.replace("{dir}", files["dir"]) for a in argv]
    code, out, err = run_cli(argv)
    assert_cli_contract(argv, code, out, err)


@settings(max_examples=examples(60))
@given(data=st.data())
def test_estimate_params_fit_models_gpus(files: dict[str, str], data: st.DataObject) -> None:
    command = data.draw(st.sampled_from(["estimate", "params", "fit", "models", "gpus"]))
    own: dict[str, list[tuple[str, Any]]] = {
        "estimate": [("--explain", None), ("--check", None),
                     ("--headroom", st.sampled_from(["5%", "0.1", "2GiB", "1"])),
                     ("--rule-of-thumb", None), ("--layers", st.sampled_from(["24", "0"])),
                     ("--hidden", st.sampled_from(["2048", "x"]))],
        "fit": [("--no-search", None), ("--no-search", None), ("--gpus", st.sampled_from(["1", "8", "0"])),
                ("--check", None), ("--headroom", st.sampled_from(["5%", "x"])),
                ("--write", st.sampled_from(["{dir}/fixed.yml", "{dir}/adir"])),
                ("--measurement", st.sampled_from(["{dir}/config.json", "{dir}/missing.json"]))],
    }
    args = [command]
    if command in ("estimate", "params", "fit"):
        args.append(data.draw(models))
    argv = data.draw(argv_with(args, own.get(command, [("--json", None)])))
    if command == "fit" and "--no-search" not in argv:
        argv.append("--no-search")  # the exhaustive search is seconds per example; the flags are what is fuzzed
    if command in ("params", "models", "gpus"):
        argv = argv[:2 if command == "params" else 1] + [a for a in argv if a in ("--json", "--bogus")]
    _run(argv, files)


data_files = st.sampled_from(["{dir}/d.jsonl", "{dir}/d.jsonl", "{dir}/bad.jsonl", "{dir}/empty.jsonl",
                              "{dir}/text.csv", "{dir}/missing.jsonl", "{dir}/adir", "{dir}/config.json"])
tokenizers = st.sampled_from([NEOX, NEOX, NEOX, "{dir}/adir", "{dir}/missing", "{dir}/config.json"])
data_flags: list[tuple[str, Any]] = [
    ("--prompt", st.sampled_from(["question", "nope"])), ("--completion", st.sampled_from(["answer", "nope"])),
    ("--text", st.sampled_from(["question", "text", "nope"])), ("--messages", st.sampled_from(["question", "m"])),
    ("--seq-len", st.sampled_from(["2", "64", "512", "1", "0", "x"])),
    ("--eos", st.sampled_from(["<|endoftext|>", "", "zz"])),
    ("--no-eos", None), ("--overflow", st.sampled_from(["error", "truncate", "drop", "split", "x"])),
]


@settings(max_examples=examples(15))
@given(data=st.data())
def test_lengths_and_pack(files: dict[str, str], data: st.DataObject) -> None:
    command = data.draw(st.sampled_from(["lengths", "pack"]))
    own = list(data_flags)
    if command == "lengths":
        own = [f for f in own if f[0] != "--overflow"] + [
            ("--batch", st.sampled_from(["1", "8", "0"])), ("--seed", st.sampled_from(["0", "-1", "7"])),
            ("--model", st.sampled_from(["gpt2", "nope"])), ("--plot", st.sampled_from(["{dir}/adir", "{dir}/x.txt",
                                                                                      "{dir}/missing/x.png"])),
            ("--html", st.sampled_from(["{dir}/adir", "{dir}/exists.jsonl"]))]
    else:
        own += [("--force", None)]
    argv = [command, data.draw(data_files), "-t", data.draw(tokenizers)]
    if command == "pack":
        argv += ["--out", data.draw(st.sampled_from(["{dir}/rows.jsonl", "{dir}/rows.parquet", "{dir}/exists.jsonl",
                                                     "{dir}/adir", "{dir}/rows.csv", "/proc/rows.jsonl"]))]
    argv = data.draw(argv_with(argv, own))
    _run(argv, files)


@settings(max_examples=examples(12))
@given(data=st.data())
def test_verify_pack_trace_measure_refuse_bad_input_fast(files: dict[str, str], data: st.DataObject) -> None:
    """The slow commands with at least one bad value each: refused before any model is built."""
    command = data.draw(st.sampled_from(["verify-pack", "trace", "measure"]))
    if command == "verify-pack":
        argv = ["verify-pack", data.draw(data_files), "-t", data.draw(tokenizers), "--limit",
                data.draw(st.sampled_from(["0", "-1"])), "--mask", data.draw(st.sampled_from(["block", "x"]))]
    elif command == "trace":
        argv = ["trace", data.draw(models), "--top", "-1", "--gpu", data.draw(st.sampled_from(["24GiB", "x"]))]
    else:
        argv = ["measure", data.draw(models), "--steps", "0", "--batch", data.draw(st.sampled_from(["1,2", "x"]))]
    if data.draw(st.booleans()):
        argv.append("--json")
    argv = [a.replace("{dir}", files["dir"]) for a in argv]
    code, out, err = run_cli(argv)
    assert_cli_contract(argv, code, out, err)
    assert code != 0
