"""Process instances: a model instance in its own worker process (`isolation="process"`)."""

from fnserve.scheduling.process.instance import ProcessInstance

__all__ = ["ProcessInstance"]
