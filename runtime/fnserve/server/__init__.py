"""Frontends (HTTP, gRPC, metrics) and the composition that runs them together."""
