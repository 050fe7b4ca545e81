package listener_test

import (
	"fmt"
	"testing"

	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// BenchmarkDeliver measures a run subscription's callback on one progress
// message: subject checks, parse, id checks, Offer.
func BenchmarkDeliver(b *testing.B) {
	srv := startNATS(b)
	l := dial(b, srv.ClientURL(), listener.Options{})
	q, run := uuid(20, 0), uuid(20, 1)
	sub, err := l.Subscribe(q, run, listener.NewMailbox())
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	subject, data := "spark.progress."+q+"."+run, progressJSON(q, run, "bench", 42)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		listener.Deliver(sub, subject, data)
	}
}

// BenchmarkDeliverTake measures a progress message's whole way through
// the listener on the hot path (issue 12): the router's delivery into the
// run's mailbox, unparsed, then the worker's Take, which parses it. Each
// message is the next batch, as a live run's are. allocs/op is what each
// event adds to the collector's pace here (the NATS client's copy of the
// message is not in it).
func BenchmarkDeliverTake(b *testing.B) {
	box, sub, subject, progressOf := subscribedRun(b, 22)
	docs := progressOf(1, b.N)
	b.SetBytes(int64(len(docs[0])))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		listener.Deliver(sub, subject, docs[i])
		if box.Take().Progress == nil {
			b.Fatal("no progress taken")
		}
	}
}

// BenchmarkDiscoverKnown measures discovery's hot path: a message of a run
// already known.
func BenchmarkDiscoverKnown(b *testing.B) {
	srv := startNATS(b)
	l := dial(b, srv.ClientURL(), listener.Options{})
	q, run := uuid(21, 0), uuid(21, 1)
	sub, err := l.Discover(func(string) bool { return true }, func(listener.Run) {})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	subject, data := "spark.progress."+q+"."+run, progressJSON(q, run, "bench", 42)
	b.ReportAllocs()
	for b.Loop() {
		listener.DiscoverMsg(sub, subject, data)
	}
}

// BenchmarkSubscribeCatchUp measures tracking a run late: subscribe, flush,
// read its last progress and termination from the stream, unsubscribe.
func BenchmarkSubscribeCatchUp(b *testing.B) {
	srv := startNATS(b)
	l := dial(b, srv.ClientURL(), listener.Options{})
	if err := l.EnsureStream(ctxT(b)); err != nil {
		b.Fatal(err)
	}
	q, run := uuid(22, 0), uuid(22, 1)
	publish(b, l, progress.KindProgress, q, run, "bench", 7)
	publish(b, l, progress.KindTerminated, q, run, "", 0)
	for b.Loop() {
		box := listener.NewMailbox()
		sub, err := l.Subscribe(q, run, box)
		if err != nil {
			b.Fatal(err)
		}
		if m := box.Take(); m.Progress == nil || m.Terminated == nil {
			b.Fatalf("not caught up: %+v", m)
		}
		_ = sub.Unsubscribe()
	}
}

// BenchmarkRetained measures listing the runs the stream retains.
func BenchmarkRetained(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("runs=%d", n), func(b *testing.B) {
			srv := startNATS(b)
			l := dial(b, srv.ClientURL(), listener.Options{})
			if err := l.EnsureStream(ctxT(b)); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				q, r := uuid(23, 0), uuid(23, i+1)
				publish(b, l, progress.KindStarted, q, r, "bench", 0)
				publish(b, l, progress.KindProgress, q, r, "bench", 1)
			}
			for b.Loop() {
				runs, err := l.Retained(ctxT(b))
				if err != nil || len(runs) != n {
					b.Fatalf("Retained: %d runs, %v", len(runs), err)
				}
			}
		})
	}
}

// TestDeliverAllocatesNothing: the router's delivery of a tracked run's
// progress into its slot, unparsed, allocates nothing (its record comes
// from rawPool and goes back once parsed or superseded; issue 12, third
// session: 112 bytes per event before), and the whole way through
// (delivery, then the worker's Take, which parses) allocates the parse's
// three objects alone. Every progress taken is the one delivered.
func TestDeliverAllocatesNothing(t *testing.T) {
	box, sub, subject, progressOf := subscribedRun(t, 23)
	docs := progressOf(1, 1000)
	i := 0
	next := func() []byte { i++; return docs[i%len(docs)] }
	// Superseded in the slot: each delivery replaces the last one.
	listener.Deliver(sub, subject, next())
	if n := testing.AllocsPerRun(100, func() { listener.Deliver(sub, subject, next()) }); n != 0 {
		t.Errorf("delivery into the slot: %v allocations; want 0", n)
	}
	if p := box.Take().Progress; p == nil || p.BatchID != int64(i%len(docs)+1) {
		t.Fatalf("took %+v; want batch %d", p, i%len(docs)+1)
	}
	// Delivered, then taken (parsed).
	i = len(docs) // the batches go on growing past the slot's mark
	docs2 := progressOf(int64(len(docs)+1), 1000)
	j := 0
	n := testing.AllocsPerRun(100, func() {
		listener.Deliver(sub, subject, docs2[j])
		if p := box.Take().Progress; p == nil || p.BatchID != int64(len(docs)+j+1) {
			t.Fatalf("took %+v; want batch %d", p, len(docs)+j+1)
		}
		j++
	})
	if n > 3 {
		t.Errorf("delivery and Take: %v allocations; want at most the parse's 3", n)
	}
}

// subscribedRun subscribes a run (query and run ids uuid(n, 0) and
// uuid(n, 1)) on a NATS server and listener of its own, into a mailbox,
// for the hot path's tests and benchmarks. progressOf returns the run's
// progress documents of batches from to from+count-1.
func subscribedRun(tb testing.TB, n int) (box *listener.Mailbox, sub *listener.RunSubscription, subject string, progressOf func(from int64, count int) [][]byte) {
	tb.Helper()
	srv := startNATS(tb)
	l := dial(tb, srv.ClientURL(), listener.Options{})
	q, run := uuid(n, 0), uuid(n, 1)
	box = listener.NewMailbox()
	sub, err := l.Subscribe(q, run, box)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	progressOf = func(from int64, count int) [][]byte {
		docs := make([][]byte, count)
		for i := range docs {
			docs[i] = progressJSON(q, run, "bench", from+int64(i))
		}
		return docs
	}
	return box, sub, "spark.progress." + q + "." + run, progressOf
}
