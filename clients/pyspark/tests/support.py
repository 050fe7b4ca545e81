"""Shared helpers of the tests: paths, environment, listeners without a sender."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
for p in (os.path.join(HERE, "stub"), os.path.dirname(HERE), HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import finalizer_listener  # noqa: E402

QUERY = "8D268DC2-BC9C-4BE8-97A9-B135D2943028"  # upper case on purpose
RUN_A = "e225d92f-2545-48f8-87a2-9c0309580f8a"
RUN_B = "0b7a2f0e-5a4b-4d43-9d5e-2f1c3b4a5d6e"


def env(name):
    """The value of an environment variable a test needs. Without it the test
    is skipped, unless FINALIZER_TEST_STRICT=1 (set by the Go harness and CI):
    then it fails."""
    v = os.environ.get(name)
    if v:
        return v
    if os.environ.get("FINALIZER_TEST_STRICT") == "1":
        raise AssertionError("%s is not set (FINALIZER_TEST_STRICT=1)" % name)
    raise unittest.SkipTest("%s is not set; run through `go test ./clients/pyspark/`" % name)


def quiet_listener(servers="nats://127.0.0.1:1", **kw):
    """A FinalizerListener whose publisher thread never starts: events stay in
    its queue for the test to inspect."""
    listener = finalizer_listener.FinalizerListener(servers, **kw)
    listener._ensure_sender = lambda: None
    return listener


def queued(listener):
    return listener._queue.snapshot()
