"""Backends load a model, run one batch, unload; they know nothing of batching or protocols."""
