"""Scheduling: validated pending requests, the priority queue, the dynamic batcher, instances."""
