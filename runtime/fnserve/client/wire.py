"""The client's side of the wire: infer bodies from numpy arrays, infer answers back to arrays,
and job documents as `Job` records. No I/O here; `jobs.py` sends what this builds.

Bodies follow KServe v2 with Triton's binary tensor extension, as tritonclient sends them: a
JSON header, then the raw tensors, its length in `Inference-Header-Content-Length`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from fnserve.errors import InvalidInputError
from fnserve.jobs.model import JobState
from fnserve.tensors import datatype_of, from_json, from_raw, to_json, to_raw

HEADER_LENGTH = "Inference-Header-Content-Length"
# Decoding a result the server already checked: no budget on its BYTES elements.
_NO_LIMIT = 2**62


@dataclass
class ModelStatistics:
    """One model's jobs by state, and when its oldest queued job was submitted
    (`GET /v2/jobs/counts`)."""

    model: str
    by_state: dict[JobState, int] = field(default_factory=lambda: dict.fromkeys(JobState, 0))
    oldest_queued_at: datetime | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ModelStatistics:
        """One entry of the counts document.

        Raises:
            ValueError: a field missing or of the wrong kind.
        """
        try:
            return cls(
                str(doc["model"]),
                {state: int(doc.get(state.value, 0)) for state in JobState},
                _optional_time(doc.get("oldest_queued_at")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a job counts document: {exc!r}") from exc

    def oldest_queued_age_s(self, now: datetime) -> float | None:
        if self.oldest_queued_at is None:
            return None
        return (now - self.oldest_queued_at).total_seconds()

    def to_json(self, now: datetime) -> dict[str, Any]:
        return {
            "model": self.model,
            **{state.value: count for state, count in self.by_state.items()},
            "oldest_queued_age_s": self.oldest_queued_age_s(now),
        }


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the server reports it (`GET /v2/jobs/{id}`).

    Times are timezone-aware UTC datetimes, None until they happen; `error` is the last
    attempt's error (the reason once FAILED); `result_size` the stored result's bytes.
    """

    id: str
    model: str
    version: str
    state: JobState
    attempts: int
    max_attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    idempotency_key: str | None
    callback_url: str | None
    result_size: int | None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Job:
        """A job from its JSON document.

        Raises:
            ValueError: the document is not a job (a field missing or of the wrong kind).
        """
        try:
            return cls(
                id=str(doc["id"]),
                model=str(doc["model"]),
                version=str(doc.get("version") or ""),
                state=JobState(doc["state"]),
                attempts=int(doc["attempts"]),
                max_attempts=int(doc["max_attempts"]),
                created_at=_time(doc["created_at"]),
                started_at=_optional_time(doc.get("started_at")),
                finished_at=_optional_time(doc.get("finished_at")),
                error=doc.get("error"),
                idempotency_key=doc.get("idempotency_key"),
                callback_url=doc.get("callback_url"),
                result_size=doc.get("result_size"),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a job document: {exc!r}") from None

    def to_json(self) -> dict[str, Any]:
        """The job as the server's JSON document (times as RFC 3339 UTC strings or null)."""
        doc = {name: getattr(self, name) for name in self.__slots__}
        doc["state"] = self.state.value
        for name in ("created_at", "started_at", "finished_at"):
            doc[name] = _rfc3339(doc[name])
        return doc

    @property
    def done(self) -> bool:
        """Whether the job has ended (succeeded, failed or cancelled)."""
        return self.state.terminal


def _time(value: Any) -> datetime:
    # RFC 3339 with a "Z" suffix: fromisoformat reads it from Python 3.11 on.
    return datetime.fromisoformat(str(value))


def _optional_time(value: Any) -> datetime | None:
    return None if value is None else _time(value)


def _rfc3339(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Body:
    """An infer body ready to POST, with the headers it needs."""

    content: bytes
    headers: dict[str, str]


def infer_body(
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | None = None,
    binary: bool = True,
    parameters: Mapping[str, Any] | None = None,
) -> Body:
    """The `/infer` body for named arrays (datatypes from their dtypes: str and bytes -> BYTES).

    Args:
        inputs: input name -> array (anything `numpy.asarray` takes).
        outputs: the outputs to return (None: every output).
        binary: tensors as raw binary data both ways; False: JSON (no FP16 / BF16 then).
        parameters: request parameters.

    Raises:
        InvalidInputError: an array JSON cannot carry (with binary=False).
    """
    header: dict[str, Any] = {"inputs": []}
    raws: list[bytes] = []
    for name, value in inputs.items():
        array = np.asarray(value)
        datatype = datatype_of(array)
        tensor: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            raw = to_raw(datatype, array)
            tensor["parameters"] = {"binary_data_size": len(raw)}
            raws.append(raw)
        else:
            tensor["data"] = _json_data(name, datatype, array)
        header["inputs"].append(tensor)
    if outputs is not None:
        header["outputs"] = [{"name": n, "parameters": {"binary_data": binary}} for n in outputs]
    params = dict(parameters or {})
    if binary and outputs is None:
        params["binary_data_output"] = True
    if params:
        header["parameters"] = params
    encoded = json.dumps(header, separators=(",", ":")).encode()
    if not binary:
        return Body(encoded, {"Content-Type": "application/json"})
    headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(encoded))}
    return Body(b"".join([encoded, *raws]), headers)


def _json_data(name: str, datatype: str, array: np.ndarray) -> list[Any]:
    try:
        return to_json(name, datatype, array)
    except InvalidInputError:  # its wording is for outputs; this is the client's input
        raise InvalidInputError(
            f"input '{name}': {datatype} data cannot travel as JSON, send it as binary data"
        ) from None


def decode_outputs(content: bytes, header_length: str | None) -> dict[str, np.ndarray]:
    """An `/infer` answer (JSON, or JSON header + binary tensors) as output name -> array.

    Raises:
        ValueError: the answer is not a well-formed infer response.
    """
    size = len(content) if header_length is None else int(header_length)
    if not 0 <= size <= len(content):
        raise ValueError(f"{HEADER_LENGTH} {size} is past the body's {len(content)} bytes")
    doc = json.loads(content[:size])
    binary = memoryview(content)[size:]
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    try:
        for output in doc["outputs"]:
            name, datatype = output["name"], output["datatype"]
            shape = tuple(int(d) for d in output["shape"])
            raw_size = (output.get("parameters") or {}).get("binary_data_size")
            if raw_size is None:
                arrays[name] = from_json(name, datatype, shape, output["data"], _NO_LIMIT)
                continue
            data = binary[offset : offset + int(raw_size)]
            offset += int(raw_size)
            arrays[name] = from_raw(name, datatype, shape, data, _NO_LIMIT)
    except (KeyError, TypeError, InvalidInputError) as exc:
        raise ValueError(f"malformed infer response: {exc}") from None
    return arrays
