package bench

import (
	"context"
	"runtime/metrics"
	"sync"
	"time"
)

// markWatchEvery is how often markWatch looks whether a collection is
// marking: fine enough for the marks of a large heap (tens of
// milliseconds to seconds), coarse enough to add little to the phase it
// watches (200 wake-ups a second).
const markWatchEvery = 5 * time.Millisecond

// interval is a span of wall-clock time.
type interval struct{ from, to time.Time }

// markWatch records when the Go runtime's collector was marking during a
// phase. /gc/cycles/total counts the collections that completed, so a
// mark still running at a phase's end, or one that began before it and
// ran through it, is not in a phase's difference of that counter (the
// sixth pass's curve read "0 collections" at 100,000 runs with a mark
// of seconds under way). Each cycle stops the world twice, at its start
// (sweep termination) and at the end of its mark, and
// /sched/pauses/total/gc counts the pauses: one more than twice the
// cycles completed means a mark is under way.
type markWatch struct {
	samples []metrics.Sample
	stop    chan struct{}
	done    chan struct{}

	mu    sync.Mutex
	marks []interval
	open  *time.Time // the start of a mark under way
}

// startMarkWatch starts watching until stop.
func startMarkWatch(ctx context.Context) *markWatch {
	w := &markWatch{
		samples: []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/sched/pauses/total/gc:seconds"}},
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	w.look(time.Now())
	go w.loop(ctx)
	return w
}

func (w *markWatch) loop(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(markWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.stop:
			return
		case now := <-t.C:
			w.look(now)
		}
	}
}

// marking reports whether a collection is marking now.
func (w *markWatch) marking() bool {
	metrics.Read(w.samples)
	var cycles, pauses uint64
	if v := w.samples[0].Value; v.Kind() == metrics.KindUint64 {
		cycles = v.Uint64()
	}
	if v := w.samples[1].Value; v.Kind() == metrics.KindFloat64Histogram {
		for _, c := range v.Float64Histogram().Counts {
			pauses += c
		}
	}
	return pauses > 2*cycles
}

// look opens or closes the current interval as the collector marks or
// not at now.
func (w *markWatch) look(now time.Time) {
	m := w.marking()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case m && w.open == nil:
		w.open = &now
	case !m && w.open != nil:
		w.marks = append(w.marks, interval{*w.open, now})
		w.open = nil
	}
}

// finish stops the watch and returns the marks seen, a mark still under
// way ending now.
func (w *markWatch) finish() []interval {
	close(w.stop)
	<-w.done
	w.look(time.Now())
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.marks
	if w.open != nil {
		out = append(out, interval{*w.open, time.Now()})
	}
	return out
}

// overlaps reports whether [from, to] meets any of marks.
func overlaps(marks []interval, from, to time.Time) bool {
	for _, m := range marks {
		if !m.to.Before(from) && !to.Before(m.from) {
			return true
		}
	}
	return false
}
