"""The gRPC frontend's access check: a grpclib `RecvRequest` listener, run before every RPC.

Each RPC maps to its Triton API group; a refused call ends with the error's status (see
`errors.py`) before its handler runs. Bearer tokens come in the `authorization` metadata,
Triton's restricted-protocol headers as `triton-grpc-protocol-KEY`.
"""

from __future__ import annotations

from grpclib.events import RecvRequest, listen
from grpclib.server import Server

from fnserve.errors import FnserveError
from fnserve.server.auth import AccessPolicy
from fnserve.server.grpc.errors import to_grpc_error

_SERVICE = "/inference.GRPCInferenceService/"
_RPC_GROUPS = {
    "health": ("ServerLive", "ServerReady", "ModelReady"),
    "metadata": ("ServerMetadata", "ModelMetadata"),
    "inference": ("ModelInfer", "ModelStreamInfer"),
    "model-config": ("ModelConfig",),
    "statistics": ("ModelStatistics",),
    "model-repository": ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"),
    "shared-memory": tuple(
        f"{kind}SharedMemory{verb}"
        for kind in ("System", "Cuda")
        for verb in ("Status", "Register", "Unregister")
    ),
    "trace": ("TraceSetting",),
    "logging": ("LogSettings",),
}
GROUP_OF_METHOD = {_SERVICE + rpc: g for g, rpcs in _RPC_GROUPS.items() for rpc in rpcs}
# Jobs are inference run later: the same role may submit, read and cancel them.
_JOBS_RPCS = ("SubmitJob", "GetJob", "GetJobResult", "CancelJob", "ListJobs", "CountJobs")
GROUP_OF_METHOD.update({f"/fnserve.jobs.v1.Jobs/{rpc}": "inference" for rpc in _JOBS_RPCS})
GROUP_OF_METHOD["/grpc.health.v1.Health/Check"] = "health"
GROUP_OF_METHOD["/grpc.health.v1.Health/Watch"] = "health"


class GrpcAccessGuard:
    """Checks each call's metadata against the policy.

    Args:
        policy: who may call what.
    """

    def __init__(self, policy: AccessPolicy) -> None:
        self._policy = policy

    async def on_request(self, event: RecvRequest) -> None:
        group = GROUP_OF_METHOD.get(event.method_name)
        if group is None:  # not a method of ours: grpclib answers UNIMPLEMENTED
            return
        metadata = event.metadata

        def header(name: str) -> bytes | None:
            value = metadata.get(name)
            if value is None:
                return None
            return value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")

        try:
            self._policy.check(group, header, event.method_name)
        except FnserveError as exc:
            raise to_grpc_error(exc) from None


def guard_grpc(server: Server, policy: AccessPolicy) -> None:
    """Check every call `server` receives against `policy` (nothing to do if it is inactive)."""
    if policy.active:
        listen(server, RecvRequest, GrpcAccessGuard(policy).on_request)
