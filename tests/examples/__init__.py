"""Tests of the worked examples under examples/."""
