"""A Dagster sensor on finalizer's `nats` action (a sketch: compiled here, not
run against Dagster; see docs/orchestrators.md). One RunRequest per final
period, with run_key = the event's id: a redelivered event starts no second
run. Requires nats-py.
"""
import asyncio
import json

import nats
from dagster import RunRequest, SensorEvaluationContext, SkipReason, sensor

NATS_URL = "nats://finalizer:4222"
SUBJECT = "finalizer.api.final.bronze.orders"


async def _fetch(after_seq: int, limit: int = 100):
    """The events after stream sequence after_seq, with their sequences."""
    nc = await nats.connect(NATS_URL)
    try:
        js = nc.jetstream()
        sub = await js.subscribe(SUBJECT, ordered_consumer=True,
                                 deliver_policy="by_start_sequence", opt_start_seq=after_seq + 1)
        out = []
        while len(out) < limit:
            try:
                msg = await sub.next_msg(timeout=1)
            except (asyncio.TimeoutError, nats.errors.TimeoutError):
                break
            out.append((msg.metadata.sequence.stream, json.loads(msg.data)))
        return out
    finally:
        await nc.close()


@sensor(job_name="orders_hourly", minimum_interval_seconds=30)
def orders_final_hours(context: SensorEvaluationContext):
    after = int(context.cursor or 0)
    events = asyncio.run(_fetch(after))
    if not events:
        return SkipReason("no new final period")
    for seq, ev in events:
        start = ev["period_start"]  # "2026-09-28T14:00:00Z"
        yield RunRequest(run_key=ev["id"], partition_key=start[:10] + "-" + start[11:16],
                         tags={"finalizer/again": str(ev.get("again", False))})
        after = seq
    context.update_cursor(str(after))
