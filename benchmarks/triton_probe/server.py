"""A real Triton (PyTriton 0.7.0's tritonserver 2.51.0) for fnserve's Triton reference data.

    /tmp/anchors/venv-triton/bin/python benchmarks/triton_probe/server.py &
    /tmp/anchors/venv-triton/bin/python benchmarks/triton_probe/client.py traffic|metrics|versions

Models `identity` (returns INPUT0) and `failing` (raises), INPUT0/OUTPUT0 FP32 [-1],
max_batch_size 8; HTTP 18700, gRPC 18701, metrics 18702; every endpoint open (no access
token), so the repository API can unload. The venv is the anchors kit's (../shared/anchors).
"""

import logging
import os
import signal
import sysconfig

# The python-backend stub must load this interpreter's libpython (see the anchors README §3).
os.environ["LD_LIBRARY_PATH"] = (
    f"{sysconfig.get_config_var('LIBDIR')}:{os.environ.get('LD_LIBRARY_PATH', '')}"
)

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

logging.basicConfig(level=logging.INFO)


@batch  # type: ignore[untyped-decorator]  # pytriton: no stubs, only in the anchors venv
def identity_fn(INPUT0: np.ndarray) -> dict[str, np.ndarray]:
    return {"OUTPUT0": INPUT0}


@batch  # type: ignore[untyped-decorator]  # pytriton: no stubs, only in the anchors venv
def failing_fn(INPUT0: np.ndarray) -> dict[str, np.ndarray]:
    raise ValueError("boom")


config = TritonConfig(
    http_address="127.0.0.1",
    http_port=18700,
    grpc_address="127.0.0.1",
    grpc_port=18701,
    metrics_address="127.0.0.1",
    metrics_port=18702,
    allow_metrics=True,
)
with Triton(config=config, security_config=TritonSecurityConfig(restricted_endpoints=[])) as triton:
    for name, fn in (("identity", identity_fn), ("failing", failing_fn)):
        triton.bind(
            model_name=name,
            infer_func=fn,
            inputs=[Tensor(name="INPUT0", dtype=np.float32, shape=(-1,))],
            outputs=[Tensor(name="OUTPUT0", dtype=np.float32, shape=(-1,))],
            config=ModelConfig(max_batch_size=8, batcher=DynamicBatcher()),
        )
    signal.signal(signal.SIGTERM, lambda *_: triton.stop())
    print("READY", flush=True)
    triton.serve()
