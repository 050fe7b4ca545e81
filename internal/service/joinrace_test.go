package service

import (
	"fmt"
	"testing"
	"time"
)

// TestATableWaitsForTheJoinALockHeldBack (the locked-table join race, on
// real NATS and PostgreSQL): query lk-a feeds lk.t alone (13:00); another
// session holds the table's control row FOR SHARE when query lk-b's run
// starts, so lk-b's join waits; lk-a reports 15:10 meanwhile. Once the
// lock goes, lk-b joins, and the table stays at 13:00, where it stood when
// lk-b started: lk-a's retries must not move it first, past data lk-b
// was writing since its start.
func TestATableWaitsForTheJoinALockHeldBack(t *testing.T) {
	const (
		queryA, runA = "0a0a0a0a-0000-4000-8000-000000000001", "0a0a0a0a-1111-4000-8000-000000000001"
		queryB, runB = "0b0b0b0b-0000-4000-8000-000000000002", "0b0b0b0b-1111-4000-8000-000000000002"
	)
	r := startLockRace(t, queryA, runA)
	unlock := lockVerdictRow(t, r.url, "lk.t")
	r.ev.started(queryB, runB, "lk-b")
	r.joinLocked(t, queryB, 20*time.Second) // lk-b's join met the lock (1 s) and waits, then sleeps between tries
	r.reportThroughTheLock(t, unlock)
	for deadline := time.Now().Add(20 * time.Second); !r.joined(t, queryB); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("lk-b did not join lk.t after the lock went")
		}
	}
	r.stillAt13(t, 1500*time.Millisecond) // lk-a's retries, after the join
}

// TestATableWaitsForAnEarlyJoinALockHeldBack (real NATS and PostgreSQL):
// the early join of a restart's recovery (finalizer.Registry.HoldDiscovery,
// taken here as the recovery takes it) meets a lock. Query lk-a feeds
// lk.t alone (13:00); lk-b's run was seen without a name (an idle event),
// so no rule could map it; its name comes in a live progress while
// discovery is held, and its join to lk.t (made at once, its start waiting
// for the release) meets another session's FOR SHARE on the table's
// control row. lk-a reports 15:10 meanwhile, and 15:20 as the lock goes.
// The early join that failed was dropped (DEBUG): lk-a's retries moved
// the table to 15:00 before lk-b's start, after the release, joined it.
// The table now waits for the early join, retried until it succeeds,
// and stays at 13:00.
func TestATableWaitsForAnEarlyJoinALockHeldBack(t *testing.T) {
	const (
		queryA, runA = "0a0a0a0a-0000-4000-8000-000000000011", "0a0a0a0a-1111-4000-8000-000000000011"
		queryB, runB = "0b0b0b0b-0000-4000-8000-000000000012", "0b0b0b0b-1111-4000-8000-000000000012"
	)
	r := startLockRace(t, queryA, runA)
	svc := r.svc
	// lk-b seen without a name: no rule maps it.
	r.ev.publish("idle", queryB, runB, fmt.Sprintf(`{"id":%q,"runId":%q,"timestamp":"2026-09-28T12:00:10.000Z"}`, queryB, runB))
	time.Sleep(500 * time.Millisecond)
	release := svc.Registry().HoldDiscovery() // as a restart's recovery holds it
	defer release()
	unlock := lockVerdictRow(t, r.url, "lk.t")
	r.ev.progress(queryB, runB, "lk-b", "2026-09-28T12:30:00") // its name, live, under the hold
	r.joinLocked(t, queryB, 20*time.Second)                    // lk-b's early join met the lock (1 s)
	if r.joined(t, queryB) {
		t.Fatal("lk-b joined lk.t through the lock")
	}
	r.reportThroughTheLock(t, unlock)
	// lk-b joins before the release (retried), or at its start after it.
	for deadline := time.Now().Add(20 * time.Second); !r.joined(t, queryB); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			release()
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatal("lk-b did not join lk.t after the lock went")
		}
	}
	r.stillAt13(t, 2500*time.Millisecond) // lk-a's retries, after the join
}
