"""Generated grpclib service stubs (messages live in `fnserve.protocol`); regenerate with
`python tools/generate_protos.py`."""
