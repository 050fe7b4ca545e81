"""Unit tests of finalizer_listener that need no NATS server."""

import json
import pickle
import threading
import time
import unittest
import uuid

import support  # noqa: F401  (sets sys.path)
import finalizer_listener as fl
import pyspark
from pyspark.sql.streaming import StreamingQueryListener

import sparkevents as ev
from support import QUERY, RUN_A, RUN_B, queued, quiet_listener

Q = QUERY.lower()


class PayloadTest(unittest.TestCase):
    def test_runs_on_the_stand_in(self):
        self.assertTrue(getattr(pyspark, "STUB", False), "the tests must import the stand-in pyspark")
        self.assertTrue(fl.HAVE_PYSPARK)
        listener = quiet_listener()
        self.assertIsInstance(listener, StreamingQueryListener)

    def test_subjects_and_payloads(self):
        listener = quiet_listener(prefix="spark.prod")
        p0 = ev.progress(QUERY, RUN_A, 0)
        listener.onQueryStarted(ev.started(QUERY, RUN_A, name="orders-v1", jobTags={"b", "a"}))
        listener.onQueryProgress(p0)
        listener.onQueryIdle(ev.idle(QUERY, RUN_A))
        listener.onQueryTerminated(ev.terminated(QUERY, RUN_A, "java.lang.RuntimeException: boom\n\tat x", "MY_ERROR"))
        items = queued(listener)
        self.assertEqual(
            [it.subject for it in items],
            [
                "spark.prod.started.%s.%s" % (Q, RUN_A),
                "spark.prod.progress.%s.%s" % (Q, RUN_A),
                "spark.prod.idle.%s.%s" % (Q, RUN_A),
                "spark.prod.terminated.%s.%s" % (Q, RUN_A),
            ],
        )
        # The progress payload is event.progress.json, byte for byte.
        self.assertEqual(items[1].payload, p0.progress.json.encode())
        self.assertEqual(
            json.loads(items[0].payload),
            {"id": Q, "runId": RUN_A, "name": "orders-v1", "timestamp": "2026-09-28T14:00:00.000Z", "jobTags": ["a", "b"]},
        )
        self.assertEqual(json.loads(items[2].payload), {"id": Q, "runId": RUN_A, "timestamp": "2026-09-28T14:00:10.000Z"})
        self.assertEqual(
            json.loads(items[3].payload),
            {"id": Q, "runId": RUN_A, "exception": "java.lang.RuntimeException: boom\n\tat x", "errorClassOnException": "MY_ERROR"},
        )

    def test_clean_termination_and_name_null(self):
        listener = quiet_listener()
        listener.onQueryStarted(ev.started(QUERY, RUN_A, name=None))
        listener.onQueryTerminated(ev.terminated(QUERY, RUN_A))
        started, term = [json.loads(it.payload) for it in queued(listener)]
        self.assertIsNone(started["name"])
        self.assertEqual(term, {"id": Q, "runId": RUN_A, "exception": None, "errorClassOnException": None})

    def test_pyspark_34_events_without_newer_attributes(self):
        class Started34(object):  # no jobTags before 4.0
            id, runId, name, timestamp = uuid.UUID(QUERY), uuid.UUID(RUN_A), "q", "2026-01-01T00:00:00.000Z"

        class Terminated34(object):  # no errorClassOnException before 3.5
            id, runId, exception = uuid.UUID(QUERY), uuid.UUID(RUN_A), None

        listener = quiet_listener()
        listener.onQueryStarted(Started34())
        listener.onQueryTerminated(Terminated34())
        started, term = [json.loads(it.payload) for it in queued(listener)]
        self.assertNotIn("jobTags", started)
        self.assertEqual(term["errorClassOnException"], None)

    def test_event_json_is_used_when_present(self):
        class WithJSON(object):
            id, runId = uuid.UUID(QUERY), uuid.UUID(RUN_A)

            def json(self):
                return '{"id":"x","runId":"y","timestamp":"t","extra":1}'

        listener = quiet_listener()
        listener.onQueryIdle(WithJSON())
        self.assertEqual(queued(listener)[0].payload, b'{"id":"x","runId":"y","timestamp":"t","extra":1}')

    def test_callbacks_never_raise(self):
        listener = quiet_listener()
        with self.assertLogs("finalizer_listener", "WARNING") as logs:
            listener.onQueryProgress(object())  # no .progress
            listener.onQueryStarted(None)
        self.assertIn("cannot queue a progress event", logs.output[0])
        self.assertEqual(listener.stats()["callback_errors"], 2)
        self.assertEqual(queued(listener), [])

    def test_arguments(self):
        for url in ("http://h:1", "nats://"):
            with self.assertRaises(ValueError, msg=url):
                fl.FinalizerListener(url)
        with self.assertRaises(ValueError):
            fl.FinalizerListener([])
        with self.assertRaises(ValueError):
            fl.FinalizerListener("nats://h:1", prefix="spark.*")
        with self.assertRaises(ValueError):
            fl.FinalizerListener("nats://h:1", prefix="a..b")
        with self.assertRaises(ValueError):
            fl.FinalizerListener("nats://h:1", password="p")
        with self.assertRaises(TypeError):
            fl.FinalizerListener("nats://h:1", pasword="p")
        servers = fl.FinalizerListener(["nats://a:1", "b:2,tls://u:p@c", "nats://tok@d:5"])._config["servers"]
        self.assertEqual([s.url for s in servers], ["nats://a:1", "nats://b:2", "tls://c:4222", "nats://d:5"])
        self.assertEqual((servers[2].user, servers[2].password), ("u", "p"))
        self.assertEqual(servers[3].token, "tok")

    def test_pickle_carries_configuration_only(self):
        listener = quiet_listener(prefix="p", queue_size=7, token="t")
        listener.onQueryProgress(ev.progress(QUERY, RUN_A, 0))
        clone = pickle.loads(pickle.dumps(listener))
        self.assertEqual(clone._config["prefix"], "p")
        self.assertEqual(clone._queue.maxsize, 7)
        self.assertEqual(len(clone._queue), 0)
        self.assertIsNone(clone._thread)
        clone.close(0)


def item(kind, run, n=0):
    return fl._Item(kind, run, "s.%s.q.%s.%d" % (kind, run, n), b"%d" % n)


class QueueTest(unittest.TestCase):
    def test_full_queue_drops_progress_keeps_termination(self):
        listener = quiet_listener(queue_size=5)
        listener.onQueryStarted(ev.started(QUERY, RUN_A))
        for b in range(10):
            listener.onQueryProgress(ev.progress(QUERY, RUN_A, b))
        listener.onQueryTerminated(ev.terminated(QUERY, RUN_A))
        items = queued(listener)
        self.assertEqual([it.kind for it in items], ["started", "progress", "progress", "progress", "terminated"])
        # The newest progress survive, in order, before the termination.
        batches = [json.loads(it.payload)["batchId"] for it in items if it.kind == "progress"]
        self.assertEqual(batches, [7, 8, 9])
        self.assertEqual(listener.stats()["dropped"], {"progress": 7})
        self.assertEqual(listener.stats()["overflow"], 0)

    def test_same_run_is_dropped_first(self):
        q = fl.EventQueue(4)
        for it in (item("progress", "A", 0), item("progress", "B", 0), item("progress", "A", 1), item("progress", "B", 1)):
            self.assertTrue(q.put(it))
        self.assertTrue(q.put(item("progress", "B", 2)))  # drops B0, not the older A0
        self.assertEqual([(i.run, i.payload) for i in q.snapshot()], [("A", b"0"), ("A", b"1"), ("B", b"1"), ("B", b"2")])
        self.assertTrue(q.put(item("idle", "C", 0)))  # no C queued: the oldest of any run (A0)
        self.assertEqual([(i.run, i.payload) for i in q.snapshot()], [("A", b"1"), ("B", b"1"), ("B", b"2"), ("C", b"0")])
        self.assertTrue(q.put(item("terminated", "B", 9)))  # makes room from its own run
        self.assertEqual([(i.run, i.kind) for i in q.snapshot()],
                         [("A", "progress"), ("B", "progress"), ("C", "idle"), ("B", "terminated")])
        self.assertEqual(q.dropped["progress"], 3)

    def test_termination_never_dropped(self):
        q = fl.EventQueue(2, block_timeout=0.2)
        self.assertTrue(q.put(item("terminated", "A")))
        self.assertTrue(q.put(item("started", "B")))
        # Nothing droppable is queued: a progress is dropped itself ...
        self.assertFalse(q.put(item("progress", "C")))
        self.assertEqual(q.dropped["progress"], 1)
        # ... a termination waits briefly for room, then is queued anyway.
        t0 = time.monotonic()
        self.assertTrue(q.put(item("terminated", "C")))
        waited = time.monotonic() - t0
        self.assertGreaterEqual(waited, 0.15)
        self.assertLess(waited, 2.0)
        self.assertEqual([i.kind for i in q.snapshot()], ["terminated", "started", "terminated"])
        self.assertEqual(q.overflow, 1)

    def test_termination_gets_room_when_the_sender_takes(self):
        q = fl.EventQueue(1, block_timeout=30)
        q.put(item("terminated", "A"))
        taken = []

        def sender():
            time.sleep(0.05)
            taken.extend(q.take(10, 1.0))

        t = threading.Thread(target=sender)
        t.start()
        t0 = time.monotonic()
        self.assertTrue(q.put(item("terminated", "B")))
        self.assertLess(time.monotonic() - t0, 10)
        t.join()
        self.assertEqual([i.run for i in taken], ["A"])
        self.assertEqual([i.run for i in q.snapshot()], ["B"])
        self.assertEqual(q.overflow, 0)

    def test_take_returns_at_once_after_close_wait(self):
        q = fl.EventQueue(3)
        q.close_wait()
        t0 = time.monotonic()
        self.assertEqual(q.take(5, 10.0), [])
        self.assertLess(time.monotonic() - t0, 1.0)


if __name__ == "__main__":
    unittest.main()
