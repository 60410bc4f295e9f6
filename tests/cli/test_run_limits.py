"""Run settings past any real run are refused, from a flag or from a config file, as config.json sizes are:
before, --rank 10**29 gave a peak of 68,664,550,781,249,999,217,885,184 GiB and exit 0."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from memfit.cli._spec_options import RUN_LIMITS

Cli = Callable[[list[str]], tuple[int, str, str]]


@pytest.mark.parametrize("name", list(RUN_LIMITS))
def test_each_limit_refuses_one_past_it_and_takes_it(cli: Cli, name: str) -> None:
    limit = RUN_LIMITS[name][0]
    flag = "--" + name.replace("_", "-")
    extra = {"rank": ["--method", "lora"], "alpha": ["--method", "lora"],
             "checkpoint_every": ["--checkpointing", "every-k"]}.get(name, [])
    rc, out, _ = cli(["estimate", "llama-3.1-8b", *extra, flag, str(limit + 1), "--json"])
    obj = json.loads(out)
    assert rc == 1 and obj["error"].startswith(f"{flag} {limit + 1:,} is past memfit's limit of {limit:,}")


def test_a_config_file_past_the_limit_is_refused_too(cli: Cli, tmp_path: Path) -> None:
    cfg = tmp_path / "run.yml"
    cfg.write_text("base_model: gpt2\nadapter: lora\nlora_r: 99999999999999999999999999999\nsequence_len: 512\n")
    rc, out, _ = cli(["estimate", "--config", str(cfg), "--json"])
    assert rc == 1 and "--rank 99,999,999,999,999,999,999,999,999,999 is past" in json.loads(out)["error"]


def test_real_runs_are_far_below_the_limits(cli: Cli) -> None:
    rc, out, _ = cli(["estimate", "llama-3.1-8b", "--method", "lora", "--rank", "1024", "--batch", "64", "--seq",
                      "131072", "--json"])
    assert rc == 0 and json.loads(out)["peak_bytes"] > 0


def test_measure_sweeps_are_held_to_the_same_limits(cli: Cli) -> None:
    rc, out, _ = cli(["measure", "gpt2", "--batch", "1,5000000", "--device", "cpu", "--json"])
    assert rc == 1 and json.loads(out)["error"].startswith("--batch 5,000,000 is past memfit's limit")
