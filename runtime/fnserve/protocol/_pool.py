"""The descriptor pool that holds fnserve's protobuf messages (see `generate.py` for why)."""

from google.protobuf import descriptor_pool

POOL = descriptor_pool.DescriptorPool()
