"""A Python client for fnserve's durable jobs: submit an inference now, collect its result
later, over the server's HTTP jobs API (`/v2/models/{name}/jobs`, `/v2/jobs/...`).

```python
from fnserve.client import JobsClient

with JobsClient("http://127.0.0.1:8000", token=None) as client:
    job = client.submit("add_sub", {"INPUT0": a, "INPUT1": b})
    job = client.wait(job.id, timeout_s=60)
    outputs = client.result(job.id)
```

`AsyncJobsClient` has the same methods as coroutines. Only the wire vocabulary is imported
here (tensors, the job records), never the server.
"""

from fnserve.client.calls import JobPage, tls_context
from fnserve.client.errors import JobsError, WaitTimeoutError
from fnserve.client.jobs import AsyncJobsClient, JobsClient
from fnserve.client.wire import Job
from fnserve.jobs.model import JobState

__all__ = [
    "AsyncJobsClient",
    "Job",
    "JobPage",
    "JobState",
    "JobsClient",
    "JobsError",
    "WaitTimeoutError",
    "tls_context",
]
