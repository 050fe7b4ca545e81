"""An Airflow deferrable trigger fed by finalizer's `nats` action (a sketch:
compiled here, not run against Airflow; see docs/orchestrators.md).

It fires when the event of the wanted period of a table is in the JetStream
stream FINALIZER_FINAL, subject <api prefix>.final.<table>. Requires nats-py.
"""
import asyncio
import json
from datetime import datetime
from typing import Any, AsyncIterator, Dict, Tuple

import nats
from airflow.triggers.base import BaseTrigger, TriggerEvent


def _instant(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


class FinalPeriodTrigger(BaseTrigger):
    """Fires with the finalizer event of `table`'s period that starts at
    `period_start` (ISO 8601), or of any later period (a later period final
    means this one is too)."""

    def __init__(self, nats_url: str, table: str, period_start: str,
                 subject_prefix: str = "finalizer.api.final", poll_seconds: float = 5.0):
        super().__init__()
        self.nats_url = nats_url
        self.table = table
        self.period_start = period_start
        self.subject_prefix = subject_prefix
        self.poll_seconds = poll_seconds

    def serialize(self) -> Tuple[str, Dict[str, Any]]:
        return (f"{self.__class__.__module__}.{self.__class__.__qualname__}", {
            "nats_url": self.nats_url, "table": self.table, "period_start": self.period_start,
            "subject_prefix": self.subject_prefix, "poll_seconds": self.poll_seconds,
        })

    async def run(self) -> AsyncIterator[TriggerEvent]:
        want = _instant(self.period_start)
        # Table names with other bytes than letters, digits and . _ - are
        # escaped in the subject (README, "Actions"); plain names are as is.
        subject = f"{self.subject_prefix}.{self.table}"
        nc = await nats.connect(self.nats_url)
        try:
            js = nc.jetstream()
            # An ephemeral ordered consumer from the stream's start: events
            # published while Airflow was down are read too.
            sub = await js.subscribe(subject, ordered_consumer=True, deliver_policy="all")
            while True:
                try:
                    msg = await sub.next_msg(timeout=self.poll_seconds)
                except (asyncio.TimeoutError, nats.errors.TimeoutError):
                    continue
                event = json.loads(msg.data)
                if _instant(event["period_start"]) >= want:
                    yield TriggerEvent(event)
                    return
        finally:
            await nc.close()
