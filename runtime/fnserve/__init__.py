"""fnserve: serve Python inference functions with Triton's protocol (KServe v2, HTTP and gRPC).

The user API:

```python
from fnserve import model, Tensor, DynamicBatching, InstanceGroup
```
"""

from __future__ import annotations

__version__ = "0.1.0"

from fnserve.calls import infer, infer_blocking
from fnserve.config.model_config import (
    DynamicBatching,
    InstanceGroup,
    QueuePolicy,
    Tensor,
    Warmup,
    WarmupInput,
)
from fnserve.ensemble import EnsembleDefinition, Step, ensemble
from fnserve.errors import (
    FnserveError,
    InvalidInputError,
    ModelConfigError,
    ModelExecutionError,
    ModelNotFoundError,
)
from fnserve.model import InstanceContext, ModelDefinition, model

__all__ = [
    "DynamicBatching",
    "EnsembleDefinition",
    "FnserveError",
    "InstanceContext",
    "InstanceGroup",
    "InvalidInputError",
    "ModelConfigError",
    "ModelDefinition",
    "ModelExecutionError",
    "ModelNotFoundError",
    "QueuePolicy",
    "Step",
    "Tensor",
    "Warmup",
    "WarmupInput",
    "__version__",
    "ensemble",
    "infer",
    "infer_blocking",
    "model",
]
