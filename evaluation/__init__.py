"""Evaluation library behind `spe-evaluate`: per-position NLL, positional-encoding properties and
templates, generation quality against real music, groove similarity of continuations."""
