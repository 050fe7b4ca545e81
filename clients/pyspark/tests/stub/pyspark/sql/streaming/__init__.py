"""Stand-in for pyspark.sql.streaming (see the package docstring)."""

from pyspark.sql.streaming.listener import (  # noqa: F401
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
    StreamingQueryProgress,
)
