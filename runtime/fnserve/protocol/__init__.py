"""Generated protobuf messages of the KServe v2 / Triton protocol and Triton's model config.

Plain messages, no transport: `config/` parses config.pbtxt with them, the frontends and `bench/`
speak them. Regenerate with `python tools/generate_protos.py` (`make proto`).
"""
