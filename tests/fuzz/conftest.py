"""Hypothesis profiles for the fuzzers: a short fixed-seed campaign by default, longer on demand.

`make test` (and so `.ci/run`) runs profile `ci`: derandomized (the same examples every run),
no example database, a few seconds in all. `FNSERVE_FUZZ_PROFILE=long` (what
`benchmarks/fuzz.sh` sets) explores many more examples with a random seed; set
`FNSERVE_FUZZ_EXAMPLES` to change how many.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    max_examples=int(os.environ.get("FNSERVE_FUZZ_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=_SLOW_OK,
    print_blob=True,
)
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("FNSERVE_FUZZ_EXAMPLES", "20000")),
    deadline=None,
    suppress_health_check=_SLOW_OK,
    print_blob=True,
)
settings.load_profile(os.environ.get("FNSERVE_FUZZ_PROFILE", "ci"))
