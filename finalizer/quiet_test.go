package finalizer_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/progress"
)

// Issue 15: quiet sources. The tests use a CDC-shaped run: a data progress
// whose source ends at 13:40, then the signals that the source is caught
// up, with quiet: {after: 5m}, and the service's clock at 16:30.

const quietClock = "2026-09-28T16:30:00Z"

// quietBatch numbers dataProgress's batches (from 1001); atomic, as
// cdcProgress's batchSeq.
var quietBatch = func() *atomic.Int64 { var n atomic.Int64; n.Store(1000); return &n }()

// dataProgress is a batch that ran and read rows up to commitTS.
func dataProgress(commitTS, at string) *progress.Event {
	batch := quietBatch.Add(1)
	end := json.RawMessage(`{"lsn":"0x` + fmt.Sprint(batch) + `","commit_ts":"` + commitTS + `"}`)
	return &progress.Event{
		Kind: progress.KindProgress, QueryID: queryA, RunID: runA, BatchID: batch, Timestamp: utc(at),
		Executed: true, NumInputRows: 10, StateOperators: []progress.StateOperator{},
		Sources: []progress.Source{{Description: "SqlServerCdc[dbo.orders]", StartOffset: json.RawMessage(`{"lsn":"0x1"}`), EndOffset: end, NumInputRows: 10}},
	}
}

// noDataProgress is what Spark 3.0-3.4 post for a trigger that ran nothing:
// the same batch id, no input rows, start = end, no addBatch.
func noDataProgress(last *progress.Event, at string) *progress.Event {
	src := last.Sources[0]
	return &progress.Event{
		Kind: progress.KindProgress, QueryID: queryA, RunID: runA, BatchID: last.BatchID, Timestamp: utc(at),
		NumInputRows: 0, StateOperators: []progress.StateOperator{},
		Sources: []progress.Source{{Description: src.Description, StartOffset: src.EndOffset, EndOffset: src.EndOffset, NumInputRows: 0}},
	}
}

// caughtUp is a batch that ran and whose every source reports latestOffset
// equal to endOffset (Kafka, rate), at its trigger time.
func caughtUp(commitTS, at string) *progress.Event {
	ev := dataProgress(commitTS, at)
	for i := range ev.Sources {
		ev.Sources[i].LatestOffset = ev.Sources[i].EndOffset
	}
	return ev
}

func idleAt(at string) *progress.Event {
	return &progress.Event{Kind: progress.KindIdle, QueryID: queryA, RunID: runA, BatchID: -1, Timestamp: utc(at)}
}

func quietSpec(after string) progress.SpecOptions {
	o := progress.SpecOptions{Time: "offset:/commit_ts"}
	if after != "" {
		o.Quiet = &progress.QuietOptions{After: after}
	}
	return o
}

// settle gives the worker time to take what was published (the fake bus
// delivers into the mailbox synchronously; the worker runs on its own).
func (g *guardRig) settle(t *testing.T) {
	t.Helper()
	time.Sleep(10 * time.Millisecond)
}

func TestQuietIdleEvents(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("quiet=%v", on), func(t *testing.T) {
			g := newGuardRig(t, quietClock)
			after := ""
			if on {
				after = "5m"
			}
			g.trackSpec(t, quietSpec(after))
			g.bus.Publish(dataProgress("2026-09-28T13:40:00", "2026-09-28T13:41:00Z"))
			eventually(t, "13:00", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T13:00:00Z")) })
			g.bus.Publish(idleAt("2026-09-28T15:30:00.000Z"))
			if on {
				eventually(t, "15:00", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T15:00:00Z")) })
			}
			g.bus.Publish(idleAt("2026-09-28T16:10:00.000Z"))
			g.bus.Publish(terminated(runA))
			g.join(t, runA)
			want, writes := "2026-09-28T13:00:00Z", 1
			if on {
				want, writes = "2026-09-28T16:00:00Z", 3
			}
			if v := g.store.Verdict("t"); !v.Equal(utc(want)) {
				t.Fatalf("verdict %v, want %s", v, want)
			}
			got := untils(g.store.Calls())
			if len(got) != writes {
				t.Fatalf("writes %v, want %d (one per period crossed)", got, writes)
			}
			if on {
				if v := testutil.ToFloat64(g.m.QuietAdvances.WithLabelValues("idle_event")); v != 2 {
					t.Errorf("finalizer_quiet_advances_total{signal=idle_event} = %v, want 2", v)
				}
			}
		})
	}
}

// The same with the signals of Spark before 3.5 (a no-data progress) and of
// sources that report latestOffset (endOffset == latestOffset).
func TestQuietProgressSignals(t *testing.T) {
	for _, signal := range []string{"no_data_progress", "caught_up"} {
		t.Run(signal, func(t *testing.T) {
			g := newGuardRig(t, quietClock)
			g.trackSpec(t, quietSpec("5m"))
			first := dataProgress("2026-09-28T13:40:00", "2026-09-28T13:41:00Z")
			g.bus.Publish(first)
			eventually(t, "13:00", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T13:00:00Z")) })
			for _, at := range []string{"2026-09-28T15:30:00Z", "2026-09-28T16:10:00Z"} {
				if signal == "no_data_progress" {
					g.bus.Publish(noDataProgress(first, at))
				} else {
					g.bus.Publish(caughtUp("2026-09-28T13:40:00", at))
				}
				want := utc(at).Add(-5 * time.Minute).Truncate(time.Hour)
				eventually(t, want.String(), func() bool { return g.store.Verdict("t").Equal(want) })
			}
			if got := untils(g.store.Calls()); len(got) != 3 {
				t.Fatalf("writes %v, want 3", got)
			}
			// The store answers before the tracker records the quiet move it
			// made: the status is read until it says so.
			var quiet *finalizer.QuietMove
			eventually(t, signal+" to 16:00 in the status", func() bool {
				quiet = g.reg.Status()[0].Quiet
				return quiet != nil && quiet.Signal == signal && quiet.Until.Equal(utc("2026-09-28T16:00:00Z"))
			})
			g.bus.Publish(terminated(runA))
			g.join(t, runA)
		})
	}
}

// source: all needs every source caught up; a source without latestOffset
// never is by the third signal.
func TestQuietAllSourcesMustBeCaughtUp(t *testing.T) {
	g := newGuardRig(t, quietClock)
	o := quietSpec("5m")
	o.Source = "all"
	g.trackSpec(t, o)
	two := func(at string, latest1 bool) *progress.Event {
		ev := caughtUp("2026-09-28T13:40:00", at)
		s1 := progress.Source{Description: "SqlServerCdc[dbo.lines]", StartOffset: json.RawMessage(`{"lsn":"0x1"}`),
			EndOffset: json.RawMessage(`{"lsn":"0x5","commit_ts":"2026-09-28T13:50:00"}`), NumInputRows: 3}
		if latest1 {
			s1.LatestOffset = json.RawMessage(`{"lsn":"0x9","commit_ts":"2026-09-28T16:00:00"}`) // behind
		}
		ev.Sources = append(ev.Sources, s1)
		return ev
	}
	g.bus.Publish(two("2026-09-28T13:41:00Z", true))
	eventually(t, "13:00", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T13:00:00Z")) })
	g.bus.Publish(two("2026-09-28T15:30:00Z", true))  // source 1 behind
	g.bus.Publish(two("2026-09-28T16:10:00Z", false)) // source 1 reports no latestOffset
	g.bus.Publish(terminated(runA))
	g.join(t, runA)
	if v := g.store.Verdict("t"); !v.Equal(utc("2026-09-28T13:00:00Z")) {
		t.Fatalf("verdict %v, want 13:00 (one source quiet, one behind)", v)
	}
}

// An idle event stamped within future_skew ahead of the clock counts as
// now; one stamped beyond it says nothing about when the source was caught
// up (a driver clock hours ahead, its idle event replayed after a restart
// long after it was sent): no quiet move, the run is held by "future" with
// the reason, like a progress time that far ahead.
func TestQuietIdleAheadOfClock(t *testing.T) {
	t.Run("within future_skew: capped at the clock", func(t *testing.T) {
		g := newGuardRig(t, quietClock)
		g.trackSpec(t, quietSpec("5m"))
		g.bus.Publish(dataProgress("2026-09-28T13:40:00", "2026-09-28T13:41:00Z"))
		eventually(t, "13:00", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T13:00:00Z")) })
		g.bus.Publish(idleAt("2026-09-28T16:34:00.000Z"))
		g.bus.Publish(terminated(runA))
		g.join(t, runA)
		// T = 16:30 (the clock), 16:30 - 5m = 16:25: the verdict is 16:00.
		if v := g.store.Verdict("t"); !v.Equal(utc("2026-09-28T16:00:00Z")) {
			t.Fatalf("verdict %v, want 16:00 (T capped at the clock)", v)
		}
	})
	t.Run("beyond future_skew: held", func(t *testing.T) {
		g := newGuardRig(t, quietClock)
		g.trackSpec(t, quietSpec("5m"))
		g.bus.Publish(dataProgress("2026-09-28T13:40:00", "2026-09-28T13:41:00Z"))
		eventually(t, "13:00", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T13:00:00Z")) })
		g.bus.Publish(idleAt("2026-09-28T22:00:00.000Z"))
		eventually(t, "held by future", func() bool {
			st := g.reg.Status()
			return len(st) == 1 && strings.HasPrefix(st[0].Held, "future: ") && strings.Contains(st[0].Held, "idle_event")
		})
		if v := testutil.ToFloat64(g.m.Candidates.WithLabelValues("future")); v != 1 {
			t.Errorf("finalizer_candidates_total{outcome=future} = %v, want 1", v)
		}
		g.bus.Publish(terminated(runA))
		g.join(t, runA)
		if v := g.store.Verdict("t"); !v.Equal(utc("2026-09-28T13:00:00Z")) {
			t.Fatalf("verdict %v, want 13:00 (a quiet signal hours ahead of the clock moves nothing)", v)
		}
	})
}

func TestQuietOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		o    progress.SpecOptions
		want string
	}{
		{progress.SpecOptions{Time: "watermark", Quiet: &progress.QuietOptions{After: "5m"}}, "quiet: not with time: watermark"},
		{progress.SpecOptions{Quiet: &progress.QuietOptions{}}, "quiet.after: required"},
		{progress.SpecOptions{Quiet: &progress.QuietOptions{After: "soon"}}, `quiet.after "soon"`},
		{progress.SpecOptions{Quiet: &progress.QuietOptions{After: "-5m"}}, `quiet.after "-5m": must be more than 0`},
	} {
		if _, err := progress.ParseSpec(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSpec(%+v) = %v, want %q", tc.o, err, tc.want)
		}
	}
}

// A randomized history of data, idle signals and replays, checked against
// an oracle: the verdict never goes back, never passes what the events
// delivered so far assert (floor of a data time, floor(min(T, now) - L) for T within
// future_skew of the clock),
// and ends at exactly the most they assert.
func TestQuietRandomizedOracle(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			g := newGuardRig(t, quietClock)
			g.trackSpec(t, quietSpec("5m"))
			now := utc(quietClock)
			base := utc("2026-09-28T08:00:00Z")
			var sent []*progress.Event
			allowed := time.Time{}
			assert := func(u time.Time) {
				if u.After(allowed) {
					allowed = u
				}
			}
			dataT := base
			clock := base
			last := (*progress.Event)(nil)
			for i := 0; i < 40; i++ {
				clock = clock.Add(time.Duration(rng.IntN(15)) * time.Minute)
				switch k := rng.IntN(10); {
				case k < 4: // a batch with new data
					dataT = dataT.Add(time.Duration(rng.IntN(20)) * time.Minute)
					if dataT.After(clock) {
						dataT = clock
					}
					ev := dataProgress(dataT.Format("2006-01-02T15:04:05"), clock.Format(time.RFC3339))
					last = ev
					sent = append(sent, ev)
					g.bus.Publish(ev)
					assert(dataT.Truncate(time.Hour))
				case k < 7: // an idle event, sometimes ahead of the clock
					at := clock
					if rng.IntN(5) == 0 {
						at = at.Add(time.Duration(rng.IntN(600)) * time.Minute)
					}
					g.bus.Publish(idleAt(at.Format(time.RFC3339)))
					if at.After(now.Add(5 * time.Minute)) {
						break // beyond future_skew: asserts nothing
					}
					if at.After(now) {
						at = now
					}
					// Rows delivered later carry times >= T - L: the clock of
					// the history never runs data behind that.
					if t2 := at.Add(-5 * time.Minute); t2.After(dataT) {
						dataT = t2
					}
					assert(at.Add(-5 * time.Minute).Truncate(time.Hour))
				case k < 8 && last != nil: // a pre-3.5 no-data progress
					ev := noDataProgress(last, clock.Format(time.RFC3339))
					g.bus.Publish(ev)
					if t2 := clock.Add(-5 * time.Minute); t2.After(dataT) {
						dataT = t2
					}
					assert(clock.Add(-5 * time.Minute).Truncate(time.Hour))
				case len(sent) > 0: // a replay of an older progress
					g.bus.Publish(sent[rng.IntN(len(sent))])
				}
				g.settle(t)
				v := g.store.Verdict("t")
				if v.After(allowed) {
					t.Fatalf("step %d: verdict %v ahead of what the events assert (%v)", i, v, allowed)
				}
			}
			g.bus.Publish(terminated(runA))
			g.join(t, runA)
			calls := untils(g.store.Calls())
			for i := 1; i < len(calls); i++ {
				if !calls[i].After(calls[i-1]) {
					t.Fatalf("writes %v: not strictly forward", calls)
				}
			}
			if limit := now.Truncate(time.Hour); allowed.After(limit) {
				allowed = limit
			}
			if v := g.store.Verdict("t"); !allowed.IsZero() && !v.Equal(allowed) {
				t.Fatalf("final verdict %v, want %v (the most the events assert)", v, allowed)
			}
		})
	}
}

// A trigger that ran nothing while its source reports more than it read
// (Kafka's minOffsetsPerTrigger holds the trigger until enough records
// wait) is not quiet: the records stamped before it are still in the
// topic.
func TestQuietNoDataProgressWithBacklog(t *testing.T) {
	g := newGuardRig(t, quietClock)
	g.trackSpec(t, quietSpec("5m"))
	first := dataProgress("2026-09-28T13:40:00", "2026-09-28T13:41:00Z")
	g.bus.Publish(first)
	eventually(t, "13:00", func() bool { return g.store.Verdict("t").Equal(utc("2026-09-28T13:00:00Z")) })
	held := noDataProgress(first, "2026-09-28T16:10:00Z")
	held.Sources[0].LatestOffset = json.RawMessage(`{"lsn":"0xffff","commit_ts":"2026-09-28T16:09:00"}`)
	g.bus.Publish(held)
	g.bus.Publish(terminated(runA))
	g.join(t, runA)
	if v := g.store.Verdict("t"); !v.Equal(utc("2026-09-28T13:00:00Z")) {
		t.Fatalf("verdict %v, want 13:00 (the source had a backlog)", v)
	}
}
