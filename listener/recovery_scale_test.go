package listener_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/internal/cputime"
	"github.com/finalizer-dev/finalizer/listener"
)

// TestRecoveryScale measures what a restart asks of the event bus for N
// retained runs (FINALIZER_RECOVERY_RUNS=N; skipped without): list the
// retained runs with their names under a hold of catch-ups (as the
// service's recovery does), then subscribe every run, 16 at once, and
// release the hold, which catches them up from what the listing read. It checks
// that every run's retained progress reached its mailbox.
func TestRecoveryScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FINALIZER_RECOVERY_RUNS"))
	if n <= 0 {
		t.Skip("set FINALIZER_RECOVERY_RUNS=N to measure the recovery of N retained runs")
	}
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	nc := rawConn(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		q, r := uuid(i, 0), uuid(i, 1)
		if _, err := js.PublishAsync("spark.started."+q+"."+r, startedJSON(q, r, "scale")); err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishAsync("spark.progress."+q+"."+r, progressJSON(q, r, "scale", 7)); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()

	began, cpu := time.Now(), cputime.Process()
	// As the service does: held from before the listing, the catch-ups
	// are made from what Retained read and the stream after it.
	release := l.HoldCatchUps()
	runs, err := l.Retained(ctx)
	if err != nil {
		t.Fatalf("Retained after %s: %v", time.Since(began), err)
	}
	listed, listedCPU := time.Since(began), cputime.Process()-cpu
	if len(runs) != n || runs[0].Name != "scale" {
		t.Fatalf("Retained: %d runs (first named %q), want %d named scale", len(runs), runs[0].Name, n)
	}
	boxes := make([]*listener.Mailbox, n)
	subs := make([]*listener.RunSubscription, n)
	began, cpu = time.Now(), cputime.Process()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				boxes[i] = listener.NewMailbox()
				s, err := l.Subscribe(runs[i].QueryID, runs[i].RunID, boxes[i])
				if err != nil {
					t.Error(err)
					continue
				}
				subs[i] = s
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	subscribed := time.Since(began)
	if err := release(ctx); err != nil {
		t.Errorf("batched catch-up: %v", err)
	}
	caught, caughtCPU := time.Since(began), cputime.Process()-cpu
	for i, b := range boxes {
		if m := b.Take(); m.Progress == nil || m.Progress.BatchID != 7 {
			t.Fatalf("run %d: took %+v, want its retained progress", i, m)
		}
	}
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	t.Logf("recovery of %d runs: listed in %s, subscribed in %s and caught up in %s more, total %s; CPU (client and server) %s listing, %s subscribing and catching up, total %s", n,
		listed.Round(time.Millisecond), subscribed.Round(time.Millisecond), (caught - subscribed).Round(time.Millisecond), (listed + caught).Round(time.Millisecond),
		listedCPU.Round(time.Millisecond), caughtCPU.Round(time.Millisecond), (listedCPU + caughtCPU).Round(time.Millisecond))
}
