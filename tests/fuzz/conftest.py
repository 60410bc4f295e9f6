"""Hypothesis profiles for the fuzzing suite (tests/fuzz/fuzzing.py says what they are)."""

from __future__ import annotations

import fuzzing  # noqa: F401  registers and loads the profile
