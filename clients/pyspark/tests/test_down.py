"""The listener while no NATS server answers: callbacks stay fast, close()
keeps to its timeout. No server needed."""

import logging
import socket
import threading
import time
import unittest

import support  # noqa: F401  (sets sys.path)
import finalizer_listener as fl
import sparkevents as ev
from support import QUERY, RUN_A

# A slow callback would hold up Spark's listener bus; these bounds are far
# above what an in-memory enqueue costs (microseconds) and far below a
# network timeout.
MAX_CALLBACK = 0.25
MAX_TOTAL = 1.0


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Blackhole(object):
    """A TCP server that accepts connections and never says a word."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        self.sock.settimeout(0.05)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.thread.join()
        for c in self.conns:
            c.close()
        self.sock.close()


class ServerDownTest(unittest.TestCase):
    def setUp(self):
        logging.getLogger("finalizer_listener").setLevel(logging.ERROR)
        self.addCleanup(logging.getLogger("finalizer_listener").setLevel, logging.NOTSET)

    def drive(self, listener, n=2000):
        worst = 0.0
        t0 = time.monotonic()
        listener.onQueryStarted(ev.started(QUERY, RUN_A))
        for b in range(n):
            e = ev.progress(QUERY, RUN_A, b)
            t = time.monotonic()
            listener.onQueryProgress(e)
            worst = max(worst, time.monotonic() - t)
        t = time.monotonic()
        listener.onQueryTerminated(ev.terminated(QUERY, RUN_A))
        worst = max(worst, time.monotonic() - t)
        return worst, time.monotonic() - t0

    def check_close(self, listener, timeout):
        t0 = time.monotonic()
        flushed = listener.close(timeout)
        took = time.monotonic() - t0
        self.assertFalse(flushed, "close() reported a flush with no server")
        self.assertLess(took, timeout + 0.5, "close(%s) took %.2fs" % (timeout, took))
        self.assertGreater(listener.stats()["pending"], 0)
        # After close, callbacks are ignored and still fast.
        t = time.monotonic()
        listener.onQueryProgress(ev.progress(QUERY, RUN_A, 99999))
        self.assertLess(time.monotonic() - t, MAX_CALLBACK)
        self.assertEqual(listener.stats()["after_close"], 1)

    def test_connection_refused(self):
        listener = fl.FinalizerListener("nats://127.0.0.1:%d" % closed_port(), queue_size=100,
                                        reconnect_wait=0.01, max_reconnect_wait=0.05)
        worst, total = self.drive(listener)
        self.assertLess(worst, MAX_CALLBACK)
        self.assertLess(total, MAX_TOTAL)
        stats = listener.stats()
        self.assertFalse(stats["connected"])
        # Bounded: the progress beyond the queue were dropped, the
        # termination was kept.
        self.assertLessEqual(stats["pending"], 100 + fl.DEFAULT_BATCH_SIZE)
        self.assertGreater(stats["dropped"].get("progress", 0), 0)
        kinds = [it.kind for it in listener._queue.snapshot()]
        self.assertEqual(kinds[-1], "terminated")
        self.check_close(listener, 0.3)

    def test_server_that_never_answers(self):
        hole = Blackhole()
        self.addCleanup(hole.close)
        listener = fl.FinalizerListener(["nats://127.0.0.1:%d" % hole.port, "nats://127.0.0.1:%d" % closed_port()],
                                        connect_timeout=0.5, reconnect_wait=0.01)
        worst, total = self.drive(listener, 500)
        self.assertLess(worst, MAX_CALLBACK)
        self.assertLess(total, MAX_TOTAL)
        self.check_close(listener, 0.3)

    def test_close_before_any_event(self):
        listener = fl.FinalizerListener("nats://127.0.0.1:%d" % closed_port())
        self.assertTrue(listener.close(1.0))
        self.assertTrue(listener.close(1.0))  # twice is fine


if __name__ == "__main__":
    unittest.main()
