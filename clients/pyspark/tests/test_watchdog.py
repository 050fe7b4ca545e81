"""The listener's watchdog against the stand-in Spark Connect client bus
(tests/stub/pyspark/sql/connect/streaming/query.py) and a classic-like
session: removal noticed, the listener registered again where PySpark
allows it, and said plainly where it does not."""

import logging
import time
import unittest
import warnings

import support  # noqa: F401  (sets sys.path)
import finalizer_listener as fl
from pyspark.sql.connect.streaming.query import FakeServer, SparkSession

import sparkevents as ev
from support import QUERY, RUN_A, queued, quiet_listener


def until(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.005)


class ConnectWatchdogTest(unittest.TestCase):
    def setUp(self):
        warnings.simplefilter("ignore")  # the stand-in warns as PySpark does
        self.server = FakeServer()
        self.spark = SparkSession(self.server, active=["q"])
        self.listener = quiet_listener()
        self.assertIsNone(self.listener.register(self.spark, watchdog=False))
        self.dog = fl.ListenerWatchdog(self.spark, self.listener, interval=0.05, silence_after=0)
        self.bus = self.spark.streams._sqlb

    def tearDown(self):
        self.dog.stop()
        self.listener.close(0)
        self.server.end_stream()

    def delivered(self, batch):
        n = len(queued(self.listener))
        self.server.post(("onQueryProgress", ev.progress(QUERY, RUN_A, batch)))
        until(lambda: len(queued(self.listener)) == n + 1)

    def test_mode_and_ok(self):
        self.assertEqual(self.dog.mode, "connect")
        self.assertEqual(self.dog.check(), "ok")
        self.delivered(0)

    def test_stream_error_removes_every_listener_and_it_comes_back(self):
        self.delivered(0)
        self.server.fail_stream()
        until(lambda: self.bus._listener_bus == [])
        with self.assertLogs("finalizer_listener", logging.WARNING) as logs:
            self.assertEqual(self.dog.check(), "readded")
        self.assertIn("Spark removed the listener", "\n".join(logs.output))
        self.assertEqual(self.server.registrations, 2)
        self.assertEqual(self.dog.stats()["removed"], 1)
        self.assertEqual(self.dog.stats()["readded"], 1)
        self.delivered(1)
        self.assertEqual(self.dog.check(), "ok")

    def test_stream_ended_by_the_server(self):
        self.server.end_stream()
        until(lambda: not self.bus._execution_thread.is_alive())
        self.assertEqual(self.bus._listener_bus, [self.listener], "the listener still looks registered")
        self.assertEqual(self.dog.check(), "readded")
        self.assertEqual(self.dog.stats()["stream_ended"], 1)
        self.assertEqual(self.server.registrations, 2)
        self.assertEqual(self.bus._listener_bus, [self.listener])
        self.delivered(2)

    def test_stream_ended_with_other_listeners_is_left_alone(self):
        other = quiet_listener()
        self.spark.streams.addListener(other)
        self.server.end_stream()
        until(lambda: not self.bus._execution_thread.is_alive())
        with self.assertLogs("finalizer_listener", logging.ERROR):
            self.assertEqual(self.dog.check(), "unrecoverable")
        self.assertEqual(self.bus._listener_bus, [self.listener, other], "the user's listeners are not touched")
        self.assertEqual(self.dog.stats()["unrecoverable"], 1)
        other.close(0)

    def test_readd_failure_is_retried(self):
        self.server.fail_stream()
        until(lambda: self.bus._listener_bus == [])
        self.server.refuse = True
        with self.assertLogs("finalizer_listener", logging.ERROR):
            self.assertEqual(self.dog.check(), "failed")
        self.assertEqual(self.dog.stats()["readd_failures"], 1)
        self.server.refuse = False
        self.assertEqual(self.dog.check(), "readded")
        self.delivered(3)

    def test_the_thread_repairs_on_its_own_and_stops_with_close(self):
        dog = self.listener.register(self.spark, watchdog=True, interval=0.02, silence_after=0)
        self.server.fail_stream()
        until(lambda: dog.stats()["readded"] >= 1)
        until(lambda: self.bus._listener_bus == [self.listener])
        self.delivered(4)
        thread = dog._thread
        self.listener.close(1.0)
        thread.join(2.0)
        self.assertFalse(thread.is_alive(), "close stops the watchdog")


class ClassicSession(object):
    """A classic (Py4J) session: streams has _jsqm, no client-side bus."""

    class Streams(object):
        def __init__(self):
            self._jsqm = object()
            self.active = ["q"]
            self.added = []

        def addListener(self, listener):
            self.added.append(listener)

        def removeListener(self, listener):
            self.added.remove(listener)

    def __init__(self):
        self.streams = self.Streams()


class BlindWatchdogTest(unittest.TestCase):
    def test_classic_says_it_cannot_see_and_watches_silence(self):
        spark = ClassicSession()
        listener = quiet_listener()
        listener.register(spark, watchdog=False)
        dog = fl.ListenerWatchdog(spark, listener, interval=1, silence_after=0.05)
        self.assertEqual(dog.mode, "classic")
        with self.assertLogs("finalizer_listener", logging.INFO) as logs:
            self.assertEqual(dog.check(), "blind")
        self.assertIn("cannot see whether the listener is still registered", "\n".join(logs.output))
        listener._last_event = time.monotonic() - 1
        with self.assertLogs("finalizer_listener", logging.WARNING) as logs:
            dog.check()
        self.assertIn("no listener event for", "\n".join(logs.output))
        dog.check()
        self.assertEqual(dog.stats()["silent"], 1, "one warning per silence")
        listener.onQueryIdle(ev.idle(QUERY, RUN_A))  # an event ends the silence
        dog.check()
        listener._last_event = time.monotonic() - 1
        dog.check()
        self.assertEqual(dog.stats()["silent"], 2)
        spark.streams.active = []
        listener._last_event = time.monotonic() - 1
        dog._silent = False
        dog.check()
        self.assertEqual(dog.stats()["silent"], 2, "no active query, no silence to report")
        listener.close(0)

    def test_bad_interval(self):
        with self.assertRaises(ValueError):
            fl.ListenerWatchdog(ClassicSession(), quiet_listener(), interval=0)


if __name__ == "__main__":
    unittest.main()
