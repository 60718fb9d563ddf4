"""Triton's Python backend: serve a repository's `model.py` (a `TritonPythonModel` class written
for Triton's python_backend) unchanged, with fnserve's own `triton_python_backend_utils`."""
