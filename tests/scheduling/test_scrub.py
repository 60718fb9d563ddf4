"""Path scrubbing of model error messages: paths go, ordinary text stays."""

from __future__ import annotations

import pytest

from fnserve.scheduling.runner import scrub_paths


@pytest.mark.parametrize(
    ("message", "scrubbed"),
    [
        ("No such file: '/home/ann/secret/w.bin'", "No such file: '<path>'"),
        ('File "/srv/app/model.py", line 3', 'File "<path>", line 3'),
        ("/tmp/x.py:12: bad value", "<path>:12: bad value"),
        (r"cannot open C:\Users\bob\w.onnx now", "cannot open <path> now"),
        ("see ./data/x.csv, ../up and ~/.ssh/id_rsa", "see <path>, <path> and <path>"),
        ("ratio 1/2 in km/h and/or 3 / 4", "ratio 1/2 in km/h and/or 3 / 4"),
        ("expected shape [2, 3], got [4]", "expected shape [2, 3], got [4]"),
    ],
)
def test_scrub_paths(message: str, scrubbed: str) -> None:
    assert scrub_paths(message) == scrubbed
