package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
)

// runService runs the service's phases.
func (r *runner) runService(ctx context.Context) error {
	if !r.cfg.BurstOnly && !r.cfg.IdleOnly && !r.cfg.LatencyOnly {
		if err := r.rawDelivery(ctx); err != nil {
			return fmt.Errorf("raw delivery: %w", err)
		}
	}
	before := sampleMemory()
	stopPeak := peakHeap(r.cfg.ProfileDir, "heap-peak.pprof")
	defer stopPeak()

	// Start and track.
	svc, err := r.startUnderTest(ctx)
	if err != nil {
		return err
	}
	if r.child != nil {
		before = memSample{rss: r.child.rss()} // the child's, ready with no run tracked
	}
	stop := func() {
		if r.cfg.Actions != "" {
			r.say("actions (%s): %d events delivered, lag p50 of the move to the delivery not kept (see the metrics)", r.cfg.Actions,
				int(svc.metric("finalizer_action_delivered_total")))
		}
		r.res.AdvanceRetries += int(svc.metric("finalizer_advance_retries_total"))
		r.res.AdvanceFailures += int(svc.metric("finalizer_advance_failures_total"))
		slow, dropped, disc := svc.connStats()
		r.res.NATSSlowConsumer += slow
		r.res.NATSDropped += dropped
		r.res.NATSDisconnects += disc
		code := svc.stop(ctx)
		if r.child != nil {
			r.res.ServiceExitCodes = append(r.res.ServiceExitCodes, code)
			r.say("the service process (pid %d) exited with code %d on SIGTERM", r.child.pid, code)
			r.child = nil
		}
		svc = nil
	}
	defer func() {
		if svc != nil {
			stop()
		}
	}()
	if err := r.profile("track", func() error { return r.track(ctx, svc) }); err != nil {
		return err
	}
	// Every run's first progress: the N first verdicts (inserts). The
	// publisher stays within Window messages of what the service took in,
	// as in the ingest: at 100,000 runs, 200 MB published at once through
	// the bench's one connection left 37% of the first verdicts missing
	// (the drivers of 100,000 runs publish on connections of their own).
	start, err := r.publishAll(ctx, func(s *sim) int64 { return 1 }, acceptedSince(svc))
	if err != nil {
		return err
	}
	last, err := r.waitVerdicts(ctx, "first verdicts", r.targetsAtLast())
	if err != nil {
		return err
	}
	r.res.FirstVerdictsSeconds = last.Sub(start).Seconds()
	r.say("first verdicts of %d tables in %s", len(r.sims), last.Sub(start).Round(time.Millisecond))

	// The resident set as the operating system reports it, before any
	// forced GC (issue 12's measure: what an operator sees, garbage the GC
	// has not collected yet included), then after a GC that returned what
	// it could (what the runs hold).
	if r.child != nil {
		rss := r.child.rss()
		n := float64(len(r.sims))
		r.res.RSSNoGCPerRunKiB = (float64(rss) - float64(before.rss)) / n / 1024
		r.res.ServiceRSSMiB = float64(rss) / (1 << 20)
		r.res.ServiceBaseRSSMiB = float64(before.rss) / (1 << 20)
		r.say("memory per tracked run: %.1f KiB resident in the service process (VmRSS %.1f MiB, %.1f MiB when it was ready with no run; no forced GC, none possible from outside)",
			r.res.RSSNoGCPerRunKiB, r.res.ServiceRSSMiB, r.res.ServiceBaseRSSMiB)
	} else if err := r.inProcessMemory(before, stopPeak); err != nil {
		return err
	}

	if r.cfg.BurstOnly {
		return r.burstPhase(ctx, svc)
	}
	if r.cfg.IdleOnly {
		return r.idle(ctx, svc)
	}
	if r.cfg.LatencyOnly {
		return r.latencyPhase(ctx, svc)
	}
	if !r.cfg.RestartOnly {
		if err := r.steady(ctx, svc); err != nil {
			return err
		}
	}
	return r.restart(ctx, &svc, stop)
}

// inProcessMemory measures the memory per run of the service in this
// process: the resident set before a forced GC and after, the heap and
// the stacks, from before (taken before the service started).
func (r *runner) inProcessMemory(before memSample, stopPeak func() uint64) error {
	rssNoGC := residentBytes()
	if peak := stopPeak(); peak > 0 {
		r.say("highest live heap from the service's start to here: %.1f KiB per run (heap-peak.pprof)", (float64(peak)-float64(before.heap))/float64(len(r.sims))/1024)
	}
	after := sampleMemory()
	n := float64(len(r.sims))
	r.res.RSSNoGCPerRunKiB = (float64(rssNoGC) - float64(before.rss)) / n / 1024
	r.res.MemPerRunKiB = (float64(after.rss) - float64(before.rss)) / n / 1024
	r.res.HeapPerRunKiB = (float64(after.heap) - float64(before.heap)) / n / 1024
	r.res.StackPerRunKiB = (float64(after.stack) - float64(before.stack)) / n / 1024
	r.res.GoroutinesPerRun = float64(after.goroutines-before.goroutines) / n
	r.say("memory per tracked run: %.1f KiB resident without a forced GC, %.1f KiB after one (heap %.1f KiB, stacks %.1f KiB, %.1f goroutines); the bench's simulated runs hold %.1f KiB per run of live heap in this process besides",
		r.res.RSSNoGCPerRunKiB, r.res.MemPerRunKiB, r.res.HeapPerRunKiB, r.res.StackPerRunKiB, r.res.GoroutinesPerRun, r.res.SimsHeapPerRunKiB)
	if r.cfg.ProfileDir != "" {
		if f, err := os.Create(filepath.Join(r.cfg.ProfileDir, "heap.pprof")); err == nil {
			_ = pprof.WriteHeapProfile(f)
			_ = f.Close()
		}
	}
	return nil
}

// burstPhase runs Bursts bursts, one boundary after the other, under one
// profile: the first one's time is the result's burst, every one's is in
// BurstRounds.
func (r *runner) burstPhase(ctx context.Context, svc underTest) error {
	if err := r.profile("burst", func() error {
		for range r.cfg.Bursts {
			took, err := r.burst(ctx, acceptedSince(svc))
			if err != nil {
				return err
			}
			if len(r.res.BurstRounds) == 0 {
				r.res.BurstSeconds = took
			}
			r.res.BurstRounds = append(r.res.BurstRounds, took)
		}
		return nil
	}); err != nil {
		return err
	}
	if r.cfg.NoBurstFloor {
		return nil
	}
	return r.profile("burst-floor", func() error {
		floor, cpu, err := r.burstFloor(ctx)
		if err != nil {
			return err
		}
		r.res.BurstFloorSeconds, r.res.BurstFloorGoCPUUsPerRow = floor, cpu
		r.res.BurstOverFloor = div(r.res.BurstSeconds, floor)
		raw := ""
		if r.res.RawEventsPerSec > 0 {
			raw = fmt.Sprintf("; NATS alone delivers %d messages of this size in %.3f s (the raw phase's rate)", len(r.sims), float64(len(r.sims))/r.res.RawEventsPerSec)
		}
		r.say("burst floor: the store alone applied the burst's %d advances (groups of %d, %d in flight, a control table of its own) in %.3f s, %.1f µs of this process's CPU per row; the service's burst took %.2f times that%s",
			len(r.sims), r.groupSize(), finalizer.DefaultCommitters, floor, cpu, r.res.BurstOverFloor, raw)
		return nil
	})
}

// latencyPhase runs the service's latency phase under its profile.
func (r *runner) latencyPhase(ctx context.Context, svc underTest) error {
	r.rrLatency = r.rr
	r.flushBeforeLatency(ctx, &r.res.Latency)
	return r.profile("latency", func() error {
		return r.latency(ctx, func() float64 { return svc.metric("finalizer_control_writes_total") }, &r.res.Latency)
	})
}

// steady runs the phases of a running service: ingest, latency, burst,
// feeders and idle.
func (r *runner) steady(ctx context.Context, svc underTest) error {
	if err := r.serviceIngest(ctx, svc); err != nil {
		return err
	}
	if err := r.latencyPhase(ctx, svc); err != nil {
		return err
	}
	if err := r.burstPhase(ctx, svc); err != nil {
		return err
	}
	if n := svc.dropped(); n != 0 {
		return fmt.Errorf("the service dropped %d events", n)
	}
	// Tables of one and of three feeders (ADR 0015), on control tables of
	// their own.
	for _, k := range []int{1, 3} {
		if err := r.profile(fmt.Sprintf("feeders-%d", k), func() error {
			f, err := r.feeders(ctx, min(len(r.sims), 1000), k, 5)
			r.res.Feeders = append(r.res.Feeders, f)
			return err
		}); err != nil {
			return fmt.Errorf("feeders: %w", err)
		}
	}
	// Idle cost (optional: it takes about 3 times Idle per round).
	if r.cfg.Idle > 0 {
		if err := r.idle(ctx, svc); err != nil {
			return fmt.Errorf("idle: %w", err)
		}
	}
	return nil
}

// restart stops the service (stop), publishes one crossing per run while
// it is down and starts it again into *svc: the recovery phase.
func (r *runner) restart(ctx context.Context, svc *underTest, stop func()) error {
	stop()
	st, stored, err := r.eventStream(ctx)
	if err != nil {
		return err
	}
	r.stored = stored
	for _, s := range r.sims {
		if _, err := r.publishProgress(s, r.clk.nextCrossing(s, s.last)); err != nil {
			return err
		}
	}
	if err := r.pub.Flush(); err != nil {
		return err
	}
	if stored, err := r.waitStored(ctx, st, len(r.sims)); err != nil {
		return err
	} else if stored < len(r.sims) {
		return fmt.Errorf("recovery: the stream stored %d of the %d progress events published while the service was down", stored, len(r.sims))
	}
	targets := r.targetsAtLast()
	err = r.profile("recovery", func() error {
		start := time.Now()
		started, err := r.startUnderTest(ctx)
		if err != nil {
			return err
		}
		*svc = started
		last, err := r.waitVerdicts(ctx, "recovery", targets)
		if err != nil {
			return err
		}
		r.res.RecoverySeconds = last.Sub(start).Seconds()
		startedIn, retained, recovered, owned := started.timings()
		r.res.RecoveryStartSeconds = startedIn.Seconds()
		if r.child != nil {
			r.say("recovery: %d runs re-applied %s after the service process was started (its /healthz answered after %s)", len(r.sims),
				last.Sub(start).Round(time.Millisecond), startedIn.Round(time.Millisecond))
			return nil
		}
		r.say("recovery: %d runs re-applied %s after start (start itself %s: retained runs listed in %s, Recover %s, ownership taken in %s)", len(r.sims),
			last.Sub(start).Round(time.Millisecond), startedIn.Round(time.Millisecond),
			retained.Round(time.Millisecond), recovered.Round(time.Millisecond), owned.Round(time.Millisecond))
		return nil
	})
	return err
}

// track tracks every run: explicit ones through the registry (as the
// track API does, persisted), ruled ones by publishing their started event
// for discovery. It returns once N trackers run.
func (r *runner) track(ctx context.Context, svc underTest) error {
	start := time.Now()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	work := make(chan *sim)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				if err := svc.trackExplicit(ctx, s); err != nil {
					mu.Lock()
					first = cmpOr(first, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, s := range r.sims {
		if s.rule {
			if err := r.pub.Publish(s.startedSubject, s.started); err != nil {
				first = cmpOr(first, err)
			}
			continue
		}
		work <- s
	}
	close(work)
	wg.Wait()
	if first != nil {
		return fmt.Errorf("track: %w", first)
	}
	if err := r.pub.Flush(); err != nil {
		return err
	}
	n := int64(len(r.sims))
	if err := r.waitCount(ctx, "trackers", n, func() int64 { return int64(svc.metric("finalizer_tracked_runs")) }); err != nil {
		return err
	}
	r.res.TrackSeconds = time.Since(start).Seconds()
	r.say("tracked %d runs in %s", n, time.Since(start).Round(time.Millisecond))
	return nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// crossingsIn counts the period crossings of batches from+1 .. to of run s.
func (r *runner) crossingsIn(s *sim, from, to int64) int {
	n := 0
	for k := from + 1; k <= to; k++ {
		if r.clk.crossing(s, k) {
			n++
		}
	}
	return n
}

// serviceIngest publishes the ingest messages to the service as fast as
// it accepts them.
func (r *runner) serviceIngest(ctx context.Context, svc underTest) error {
	n := len(r.sims) * r.cfg.IngestPerRun
	accepted := acceptedSince(svc)
	// The baseline is taken once the first verdicts' writes are all
	// counted: the observer sees a verdict at its commit, before the
	// tracker that wrote it has counted the write (a group commit hands
	// its results back to its trackers after the commit), and a write
	// counted late would be charged to the ingest.
	writes0 := r.settle(ctx, func() float64 { return svc.metric("finalizer_control_writes_total") })
	// The phase ends when the service has taken every message in and the
	// stream has stored them, as a raw round does (rawRound).
	st, from, err := r.eventStream(ctx)
	if err != nil {
		return err
	}
	var start, acceptedAt time.Time
	rt := newRuntimeStats()
	var rt0, rt1 runtimeReading
	err = r.profile("ingest", func() error {
		rt0 = rt.read()
		var err error
		if start, err = r.blast(ctx, n, func(i int) error {
			s, k := r.ingestAt(i)
			_, err := r.publishProgress(s, k)
			return err
		}, accepted); err != nil {
			return err
		}
		if err := r.waitCount(ctx, "ingest", int64(n), accepted); err != nil {
			return err
		}
		acceptedAt = time.Now()
		storedAt, err := r.capturedAt(ctx, st, from, n)
		if err != nil {
			return err
		}
		acceptedAt = maxTime(acceptedAt, storedAt)
		rt1 = rt.read()
		_, err = r.waitVerdicts(ctx, "ingest", r.targetsAtLast())
		return err
	})
	if err != nil {
		return err
	}
	settled := time.Now()
	crossings := 0
	for _, s := range r.sims {
		crossings += r.crossingsIn(s, 1, s.last)
	}
	r.res.IngestEventsPerSec = float64(n) / acceptedAt.Sub(start).Seconds()
	r.res.SettledEventsPerSec = float64(n) / settled.Sub(start).Seconds()
	writes := r.settle(ctx, func() float64 { return svc.metric("finalizer_control_writes_total") })
	r.res.IngestWritesPerPeriod = (writes - writes0) / float64(max(crossings, 1))
	r.res.IngestAllocKiBPerEvent = float64(rt1.allocs-rt0.allocs) / 1024 / float64(max(n, 1))
	r.res.IngestAllocsPerEvent = float64(rt1.objects-rt0.objects) / float64(max(n, 1))
	r.res.IngestGCCycles = int(rt1.cycles - rt0.cycles)
	r.say("ingest: %d events accepted at %.0f/s (%.0f%% of raw), all verdicts committed at %.0f/s, %.2f writes per (table, period)",
		n, r.res.IngestEventsPerSec, 100*r.res.IngestEventsPerSec/r.res.RawEventsPerSec, r.res.SettledEventsPerSec, r.res.IngestWritesPerPeriod)
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// eventStream returns the service's event stream and the sequence of the
// last message it stored.
func (r *runner) eventStream(ctx context.Context) (jetstream.Stream, uint64, error) {
	js, err := jetstream.New(r.pub)
	if err != nil {
		return nil, 0, err
	}
	st, err := js.Stream(ctx, listener.DefaultStream)
	if err != nil {
		return nil, 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, 0, err
	}
	return st, info.State.LastSeq, nil
}
