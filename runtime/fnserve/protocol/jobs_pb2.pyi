from . import grpc_service_pb2 as _grpc_service_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    QUEUED: _ClassVar[JobState]
    RUNNING: _ClassVar[JobState]
    SUCCEEDED: _ClassVar[JobState]
    FAILED: _ClassVar[JobState]
    CANCELLED: _ClassVar[JobState]
JOB_STATE_UNSPECIFIED: JobState
QUEUED: JobState
RUNNING: JobState
SUCCEEDED: JobState
FAILED: JobState
CANCELLED: JobState

class Job(_message.Message):
    __slots__ = ("id", "model", "version", "state", "attempts", "max_attempts", "created_at", "started_at", "finished_at", "error", "idempotency_key", "callback_url", "result_size")
    ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_URL_FIELD_NUMBER: _ClassVar[int]
    RESULT_SIZE_FIELD_NUMBER: _ClassVar[int]
    id: str
    model: str
    version: str
    state: JobState
    attempts: int
    max_attempts: int
    created_at: float
    started_at: float
    finished_at: float
    error: str
    idempotency_key: str
    callback_url: str
    result_size: int
    def __init__(self, id: _Optional[str] = ..., model: _Optional[str] = ..., version: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., attempts: _Optional[int] = ..., max_attempts: _Optional[int] = ..., created_at: _Optional[float] = ..., started_at: _Optional[float] = ..., finished_at: _Optional[float] = ..., error: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., callback_url: _Optional[str] = ..., result_size: _Optional[int] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("request", "idempotency_key", "callback_url")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_URL_FIELD_NUMBER: _ClassVar[int]
    request: _grpc_service_pb2.ModelInferRequest
    idempotency_key: str
    callback_url: str
    def __init__(self, request: _Optional[_Union[_grpc_service_pb2.ModelInferRequest, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., callback_url: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("id", "wait_seconds")
    ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    id: str
    wait_seconds: float
    def __init__(self, id: _Optional[str] = ..., wait_seconds: _Optional[float] = ...) -> None: ...

class GetJobResultRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("model", "state", "limit", "page_token")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    model: str
    state: JobState
    limit: int
    page_token: str
    def __init__(self, model: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CountJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelJobCounts(_message.Message):
    __slots__ = ("model", "queued", "running", "succeeded", "failed", "cancelled", "oldest_queued_at")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_QUEUED_AT_FIELD_NUMBER: _ClassVar[int]
    model: str
    queued: int
    running: int
    succeeded: int
    failed: int
    cancelled: int
    oldest_queued_at: float
    def __init__(self, model: _Optional[str] = ..., queued: _Optional[int] = ..., running: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ..., oldest_queued_at: _Optional[float] = ...) -> None: ...

class CountJobsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelJobCounts]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelJobCounts, _Mapping]]] = ...) -> None: ...
