"""Every CLI option parser, fuzzed: sizes (24GiB, 80GB), shares (5%, 0.05), GPU names, comma lists (1,2,4;
q_proj,v_proj). Each either returns a value that means what was typed or raises one MemfitError; the same
strings through the CLI keep the CLI's contract (conftest.assert_cli_contract)."""

from __future__ import annotations

import re

from fuzzing import assert_cli_contract, examples, run_cli
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memfit.errors import MemfitError

UNITS = ["B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "kb", "gib", "Gb", "G", "GI", "iB", ""]
FACTORS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
           "tib": 2**40}
number = st.one_of(st.integers(0, 10**6).map(str), st.floats(0, 1e6, allow_nan=False).map(lambda f: f"{f:.3f}"),
                   st.sampled_from(["", ".", "1.", ".5", "-1", "+2", "1e3", "nan", "inf", "0x10", "1_000", "２４",
                                    "9" * 40]))
size_text = st.one_of(
    st.builds(lambda n, sp, u, pad: f"{pad}{n}{sp}{u}{pad}", number, st.sampled_from(["", " ", "  "]),
              st.sampled_from(UNITS), st.sampled_from(["", " ", "\t"])),
    st.text(max_size=12),
)


@settings(max_examples=examples(300))
@given(size_text)
@example("24GiB")
@example("80GB")
@example("24")
@example("1e3GB")
def test_parse_size_is_the_typed_bytes_or_one_error(text: str) -> None:
    """An oracle written apart from parse_size: number times the unit's factor (GiB = 1024^3, GB = 10^9)."""
    from memfit.units import parse_size

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B|B)\s*", text, re.IGNORECASE)
    try:
        got = parse_size(text)
    except MemfitError as exc:
        assert m is None, text  # a well-formed size is never refused
        assert str(exc) and "\n" not in str(exc)
        return
    assert m is not None, text
    assert got == round(float(m.group(1)) * FACTORS[m.group(2).lower()])


share = st.one_of(
    st.floats(-1, 2).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "NaN%", "inf%", "1e-3", "1e400"]),
    st.floats(-10, 200, allow_nan=False).map(lambda f: f"{f:g}%"),
    st.builds(lambda n, u: f"{n}{u}", st.integers(0, 100), st.sampled_from(["GiB", "GB", "MiB", "%", "", "x"])),
    st.text(max_size=8),
)


@settings(max_examples=examples(300))
@given(share)
@example("5%")
@example("0.05")
@example("2GiB")
@example("100%")
@example("nan%")
def test_headroom_is_a_share_in_0_1_or_a_size_or_one_error(text: str) -> None:
    from memfit.estimate.fits import Headroom

    try:
        room = Headroom.parse(text)
    except MemfitError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    if room.bytes is not None:
        assert room.fraction is None and room.bytes >= 0
    else:
        assert room.fraction is not None and 0.0 <= room.fraction < 1.0  # NaN fails this: it must be refused
        budget = room.budget(24 * 2**30)
        assert 0 < budget <= 24 * 2**30


names = st.text(alphabet=st.sampled_from("qkvo_projgateupdownall-linear ,\t"), max_size=30)


@settings(max_examples=examples(300))
@given(names)
@example(",,,")
@example("q_proj,,v_proj")
@example(" all-linear ")
def test_targets_list_names_every_module_or_one_error(text: str) -> None:
    from memfit.estimate.spec import parse_targets

    try:
        got = parse_targets(text)
    except MemfitError:
        assert not all(t.strip() for t in text.split(","))  # refused only with an empty name in it
        return
    assert got == tuple(t.strip() for t in text.split(",")) and all(got)


int_list = st.text(alphabet=st.sampled_from("0123456789,- x."), max_size=16)


@settings(max_examples=examples(300))
@given(int_list)
@example("1,2,4")
@example("4,4,1")
@example(",")
def test_batch_lists_are_positive_distinct_in_order_or_one_error(text: str) -> None:
    from memfit.cli.measure import parse_int_list

    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        got = parse_int_list(text, "--batch")
    except MemfitError:
        assert not parts or not all(re.fullmatch(r"[+-]?\d+", p) and int(p) >= 1 for p in parts)
        return
    assert got == list(dict.fromkeys(int(p) for p in parts)) and all(v >= 1 for v in got)


gpu_text = st.one_of(st.sampled_from(["24GiB", "80GB", "A100-80GB", "rtx4090", "h100", "T4", "24", "", " ", "0GiB",
                                      "1B", "H100 80 GB", "a100_40gb"]), size_text)


@settings(max_examples=examples(30))
@given(gpu=gpu_text, room=st.one_of(st.none(), share), check=st.booleans())
def test_estimate_cli_with_any_gpu_and_headroom_keeps_the_contract(gpu: str, room: str | None, check: bool) -> None:
    argv = ["estimate", "gpt2", "--gpu", gpu, "--json", *(["--headroom", room] if room is not None else []),
            *(["--check"] if check else [])]
    code, out, err = run_cli(argv)
    assert_cli_contract(argv, code, out, err)


@settings(max_examples=examples(20))
@given(batch=int_list, seq=int_list, ckpt=st.sampled_from(["none", "full", "both", "every-k", "x", ""]))
def test_measure_cli_refuses_bad_sweeps_before_measuring(batch: str, seq: str, ckpt: str) -> None:
    """A --steps 0 makes every argv a bad input after the lists parse: nothing is measured, so each example is
    milliseconds, and the lists are parsed exactly as a real sweep would parse them. Values are passed as
    ``--batch=VALUE``: a bare ``--`` value would end the options (click, as any getopt parser), turning the
    ``--json`` after it into a positional argument, which is the shell's meaning and not a bad sweep."""
    argv = ["measure", "gpt2", f"--batch={batch}", f"--seq={seq}", "--checkpointing", ckpt, "--steps", "0", "--json"]
    code, out, err = run_cli(argv)
    assert_cli_contract(argv, code, out, err)
    assert code != 0
