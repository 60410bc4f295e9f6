"""Validation harnesses: the engines against each other and against real training steps."""
