"""Worked examples served by fnserve (each folder one)."""
