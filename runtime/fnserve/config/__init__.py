"""Model and server configuration records (Triton's field names, verbatim)."""

from fnserve.config.model_config import (
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    QueuePolicy,
    Tensor,
)

__all__ = ["DynamicBatching", "InstanceGroup", "ModelConfig", "QueuePolicy", "Tensor"]
