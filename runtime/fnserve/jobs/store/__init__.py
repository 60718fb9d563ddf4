"""Where jobs live: `base.JobStore` is the seam; `sqlite.py` (embedded default) and `postgres.py`
(shared by a fleet) implement it with the same semantics, checked by one test suite."""
