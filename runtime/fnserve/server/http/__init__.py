"""The HTTP/REST frontend: Triton's routes on Starlette; uvicorn (HTTP/1.1), Hypercorn (h2c)."""
