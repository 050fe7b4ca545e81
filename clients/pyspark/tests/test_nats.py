"""finalizer_listener against a real nats-server (started by the Go test
clients/pyspark/pyspark_test.go, which passes the URLs in the environment)."""

import json
import logging
import os
import ssl
import subprocess
import sys
import time
import unittest
from urllib.parse import quote

import support
import finalizer_listener as fl
import sparkevents as ev
from natsclient import Client
from support import QUERY, RUN_A, RUN_B, env

Q = QUERY.lower()


class PublishTest(unittest.TestCase):
    def setUp(self):
        self.url = env("FINALIZER_NATS_URL")

    def subscriber(self, subject, url=None, **kw):
        c = Client(url or self.url, **kw)
        self.addCleanup(c.close)
        c.subscribe(subject)
        return c

    def test_every_kind_in_order_on_its_subject(self):
        sub = self.subscriber("order.>")
        listener = fl.FinalizerListener(self.url, prefix="order")
        posted = []

        def post(callback, event, kind, run):
            callback(event)
            qid, rid, payload = fl.payload_for(kind, event)
            posted.append(("order.%s.%s.%s" % (kind, qid, rid), payload))

        # Two runs of one query, interleaved the way one listener bus posts them.
        post(listener.onQueryStarted, ev.started(QUERY, RUN_A), "started", RUN_A)
        post(listener.onQueryStarted, ev.started(QUERY, RUN_B, name=None), "started", RUN_B)
        for b in range(5):
            post(listener.onQueryProgress, ev.progress(QUERY, RUN_A, b, commit_ts="2026-09-28T14:%02d:00Z" % b), "progress", RUN_A)
            post(listener.onQueryProgress, ev.progress(QUERY, RUN_B, b), "progress", RUN_B)
        post(listener.onQueryIdle, ev.idle(QUERY, RUN_A), "idle", RUN_A)
        post(listener.onQueryTerminated, ev.terminated(QUERY, RUN_B, "java.lang.IllegalStateException: x", "E"), "terminated", RUN_B)
        post(listener.onQueryProgress, ev.progress(QUERY, RUN_A, 5), "progress", RUN_A)
        post(listener.onQueryTerminated, ev.terminated(QUERY, RUN_A), "terminated", RUN_A)
        self.assertTrue(listener.close(5.0))

        got = sub.messages(len(posted))
        # One connection, one subscriber: the order is the posting order
        # (per run is what finalizer relies on; here it is global).
        self.assertEqual(got, posted)
        subjects = [s for s, _ in got]
        self.assertEqual(subjects[0], "order.started.%s.%s" % (Q, RUN_A))
        self.assertEqual(subjects[-1], "order.terminated.%s.%s" % (Q, RUN_A))
        a = [s.split(".")[1] for s in subjects if s.endswith(RUN_A)]
        self.assertEqual(a, ["started"] + ["progress"] * 5 + ["idle", "progress", "terminated"])
        # Payloads: the progress JSON as PySpark gives it, the others as json4s would.
        progress = [json.loads(p) for s, p in got if s.startswith("order.progress.") and s.endswith(RUN_A)]
        self.assertEqual([p["batchId"] for p in progress], [0, 1, 2, 3, 4, 5])
        self.assertEqual(progress[1]["sources"][0]["endOffset"], {"topic": {"0": 1001}, "commit_ts": "2026-09-28T14:01:00Z"})
        term_b = json.loads([p for s, p in got if s.startswith("order.terminated.") and s.endswith(RUN_B)][0])
        self.assertEqual(term_b, {"id": Q, "runId": RUN_B, "exception": "java.lang.IllegalStateException: x",
                                  "errorClassOnException": "E"})
        stats = listener.stats()
        self.assertEqual((stats["published"], stats["pending"], stats["dropped"]), (len(posted), 0, {}))

    def test_close_flushes_within_its_timeout(self):
        n = 3000
        sub = self.subscriber("flush.>")
        listener = fl.FinalizerListener(self.url, prefix="flush")
        for b in range(n):
            listener.onQueryProgress(ev.progress(QUERY, RUN_A, b))
        listener.onQueryTerminated(ev.terminated(QUERY, RUN_A))
        t0 = time.monotonic()
        self.assertTrue(listener.close(5.0))
        self.assertLess(time.monotonic() - t0, 5.0)
        got = sub.messages(n + 1, timeout=20)
        self.assertEqual([json.loads(p)["batchId"] for _, p in got[:-1]], list(range(n)))
        self.assertTrue(got[-1][0].startswith("flush.terminated."))

    def test_several_servers_first_down(self):
        sub = self.subscriber("multi.>")
        listener = fl.FinalizerListener(["nats://127.0.0.1:1", self.url], prefix="multi", reconnect_wait=0.01)
        with self.assertLogs("finalizer_listener", "WARNING"):
            listener.onQueryProgress(ev.progress(QUERY, RUN_A, 7))
            self.assertTrue(listener.close(5.0))
        subject, payload = sub.next_msg()
        self.assertEqual(subject, "multi.progress.%s.%s" % (Q, RUN_A))


class AuthTest(unittest.TestCase):
    def roundtrip(self, url, sub_kw, listener_kw, prefix):
        sub = Client(url, **sub_kw)
        self.addCleanup(sub.close)
        sub.subscribe(prefix + ".>")
        listener = fl.FinalizerListener(url, prefix=prefix, **listener_kw)
        listener.onQueryTerminated(ev.terminated(QUERY, RUN_A))
        self.assertTrue(listener.close(5.0))
        subject, payload = sub.next_msg()
        self.assertEqual(subject, "%s.terminated.%s.%s" % (prefix, Q, RUN_A))
        self.assertEqual(json.loads(payload)["runId"], RUN_A)

    def test_user_password(self):
        url = env("FINALIZER_NATS_USER_URL")
        user, password = env("FINALIZER_NATS_USER"), env("FINALIZER_NATS_PASSWORD")
        self.roundtrip(url, {"user": user, "password": password}, {"user": user, "password": password}, "up")
        # In the URL, too.
        host = url.split("://", 1)[1]
        userinfo = "%s:%s" % (quote(user, safe=""), quote(password, safe=""))
        self.roundtrip("nats://%s@%s" % (userinfo, host), {"user": user, "password": password}, {}, "upurl")

    def test_wrong_password_is_reported_not_raised(self):
        url = env("FINALIZER_NATS_USER_URL")
        listener = fl.FinalizerListener(url, user=env("FINALIZER_NATS_USER"), password="wrong", reconnect_wait=0.05)
        with self.assertLogs("finalizer_listener", "WARNING") as logs:
            listener.onQueryTerminated(ev.terminated(QUERY, RUN_A))
            support_wait(lambda: any("Authorization Violation" in m for m in logs.output))
            self.assertFalse(listener.close(0.2))

    def test_token(self):
        url = env("FINALIZER_NATS_TOKEN_URL")
        token = env("FINALIZER_NATS_TOKEN")
        self.roundtrip(url, {"token": token}, {"token": token}, "tok")
        host = url.split("://", 1)[1]
        self.roundtrip("nats://%s@%s" % (token, host), {"token": token}, {}, "tokurl")

    def test_tls(self):
        url = env("FINALIZER_NATS_TLS_URL")  # tls://127.0.0.1:port
        ca = env("FINALIZER_NATS_TLS_CA")
        ctx = ssl.create_default_context(cafile=ca)
        self.roundtrip(url, {"tls": ctx}, {"tls_ca_file": ca}, "tls")
        # nats:// to a server that requires TLS: upgraded because INFO says so.
        plain = "nats://" + url.split("://", 1)[1]
        self.roundtrip(plain, {"tls": ctx}, {"tls": ctx}, "tlsinfo")

    def test_tls_untrusted_certificate_is_refused(self):
        url = env("FINALIZER_NATS_TLS_URL")
        listener = fl.FinalizerListener(url, reconnect_wait=0.05)  # system CAs only
        with self.assertLogs("finalizer_listener", "WARNING") as logs:
            listener.onQueryTerminated(ev.terminated(QUERY, RUN_A))
            support_wait(lambda: any("CERTIFICATE_VERIFY_FAILED" in m for m in logs.output))
            self.assertFalse(listener.close(0.2))


def support_wait(pred):
    from natsclient import wait_for

    wait_for(pred, timeout=10, what="a log line")


class DriveTest(unittest.TestCase):
    """drive.py replays the real Spark event log through the listener."""

    def test_spark_event_log(self):
        url = env("FINALIZER_NATS_URL")
        events = env("FINALIZER_SPARK_EVENTS")
        sub = Client(url)
        self.addCleanup(sub.close)
        sub.subscribe("drive.>")
        out = subprocess.run(
            [sys.executable, os.path.join(support.HERE, "drive.py"), "--url", url, "--prefix", "drive", "--events", events],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
        )
        self.assertEqual(out.returncode, 0, out.stderr.decode())
        stats = json.loads(out.stdout)
        self.assertEqual((stats["events"], stats["published"]), (9, 9))
        got = sub.messages(9)
        q, r = "8d268dc2-bc9c-4be8-97a9-b135d2943028", "e225d92f-2545-48f8-87a2-9c0309580f8a"
        self.assertEqual(got[0][0], "drive.started.%s.%s" % (q, r))
        self.assertEqual(json.loads(got[0][1]),
                         {"id": q, "runId": r, "name": None, "timestamp": "2020-07-29T10:56:55.947Z", "jobTags": []})
        progress = [json.loads(p) for s, p in got[1:]]
        self.assertTrue(all(s == "drive.progress.%s.%s" % (q, r) for s, _ in got[1:]))
        self.assertEqual([p["batchId"] for p in progress], list(range(8)))
        # Listener form: offsets nested, batch 0's NaN rate left out.
        self.assertIsNone(progress[0]["sources"][0]["startOffset"])
        self.assertEqual(progress[0]["sources"][0]["endOffset"], {"test5": {"0": 48279}})
        self.assertNotIn("inputRowsPerSecond", progress[0]["sources"][0])
        self.assertEqual(progress[7]["timestamp"], "2020-07-29T10:57:05.916Z")


if __name__ == "__main__":
    logging.basicConfig()
    unittest.main()
