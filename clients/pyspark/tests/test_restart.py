"""Reconnect after the NATS server restarts (driven by the Go test, which
stops and starts the embedded server on the same port and store directory
when asked through files in FINALIZER_TEST_CTL)."""

import base64
import json
import logging
import os
import time
import unittest

import support  # noqa: F401  (sets sys.path)
import finalizer_listener as fl
import sparkevents as ev
from natsclient import Client, wait_for
from support import QUERY, RUN_A, env

Q = QUERY.lower()
STREAM = "RESTART_TEST"
PREFIX = "rt"
MAX_CALLBACK = 0.25


def ask(ctl, what, answer, timeout=30):
    """Ask the Go test to do something and wait until it is done."""
    tmp = os.path.join(ctl, what + ".tmp")
    with open(tmp, "w") as f:
        f.write(what)
    os.rename(tmp, os.path.join(ctl, what))
    wait_for(lambda: os.path.exists(os.path.join(ctl, answer)), timeout, what="the Go test to " + what)


def js(client, api, body):
    reply = json.loads(client.request("$JS.API." + api, json.dumps(body).encode()))
    if "error" in reply:
        raise AssertionError("%s: %s" % (api, reply["error"]))
    return reply


def stored(url):
    """Every message of the test stream, as (subject, payload), in order."""
    c = Client(url)
    try:
        info = js(c, "STREAM.INFO." + STREAM, {})
        out = []
        for seq in range(info["state"]["first_seq"], info["state"]["last_seq"] + 1):
            m = js(c, "STREAM.MSG.GET." + STREAM, {"seq": seq})["message"]
            out.append((m["subject"], base64.b64decode(m.get("data", ""))))
        return out
    finally:
        c.close()


def first_occurrences(msgs):
    seen, out = set(), []
    for m in msgs:
        if m not in seen:
            seen.add(m)
            out.append(m)
    return out


class RestartTest(unittest.TestCase):
    def test_reconnects_after_server_restart(self):
        url = env("FINALIZER_NATS_URL")
        ctl = env("FINALIZER_TEST_CTL")
        logging.getLogger("finalizer_listener").setLevel(logging.ERROR)

        c = Client(url)
        js(c, "STREAM.CREATE." + STREAM, {"name": STREAM, "subjects": [PREFIX + ".>"], "storage": "file"})
        c.close()

        listener = fl.FinalizerListener(url, prefix=PREFIX, reconnect_wait=0.02, max_reconnect_wait=0.2)
        expected = []

        def post(callback, event, kind):
            t = time.monotonic()
            callback(event)
            took = time.monotonic() - t
            qid, rid, payload = fl.payload_for(kind, event)
            expected.append(("%s.%s.%s.%s" % (PREFIX, kind, qid, rid), payload))
            return took

        post(listener.onQueryStarted, ev.started(QUERY, RUN_A), "started")
        for b in range(5):
            post(listener.onQueryProgress, ev.progress(QUERY, RUN_A, b), "progress")
        wait_for(lambda: len(stored(url)) >= 6, what="the first 6 events in the stream")
        self.assertTrue(listener.stats()["connected"])

        ask(ctl, "stop", "stopped")
        # The server is gone: callbacks stay fast while the publisher retries.
        worst = max(post(listener.onQueryProgress, ev.progress(QUERY, RUN_A, b), "progress") for b in range(5, 10))
        self.assertLess(worst, MAX_CALLBACK)
        wait_for(lambda: not listener.stats()["connected"], what="the listener to notice the server is down")

        ask(ctl, "start", "started")
        for b in range(10, 13):
            post(listener.onQueryProgress, ev.progress(QUERY, RUN_A, b), "progress")
        post(listener.onQueryTerminated, ev.terminated(QUERY, RUN_A), "terminated")
        self.assertTrue(listener.close(15.0), listener.stats())
        self.assertGreaterEqual(listener.stats()["reconnects"], 1)

        # Everything arrived, in order; a batch in flight during the stop
        # may have been sent twice (at least once delivery).
        msgs = wait_for(lambda: (lambda m: m if len(first_occurrences(m)) >= len(expected) else None)(stored(url)),
                        what="all events in the stream")
        self.assertEqual(first_occurrences(msgs), expected)
        self.assertEqual(msgs[-1][0], "%s.terminated.%s.%s" % (PREFIX, Q, RUN_A))


if __name__ == "__main__":
    unittest.main()
