//go:build unix

package embeddednats_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/internal/cputime"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/listener"
)

// BenchmarkDelivery measures what one message costs the process from a
// publisher's TCP connection (a Spark driver's) through the event stream
// (as listener.EnsureStream makes it: one message per subject, written
// asynchronously) to a subscriber on the service's side that takes every
// event with one subscription (as the listener's router does) and only
// counts it; the subscriber's connection over TCP loopback or in-process
// (nats.InProcessServer). ns/op is the wall time per message; cpu-µs/msg
// the process's CPU (user and system, every goroutine: publisher,
// server, subscriber) per message; allocs/op and B/op every goroutine's
// allocation per message (the server's included). 2 KB documents on
// 10,000 subjects, the publisher at most 10,000 messages ahead of the
// subscriber, as in finalizer bench (window=10000), or one at a time, the
// next published when the last is delivered (window=1: what a message
// costs at a low rate, where nothing is batched).
//
//	go test -run '^$' -bench Delivery -benchtime 200000x -count 5 ./internal/embeddednats
func BenchmarkDelivery(b *testing.B) {
	for _, window := range []int{benchWindow, 1} {
		for _, mode := range []string{"tcp", "inprocess"} {
			b.Run(fmt.Sprintf("%s/window=%d", mode, window), func(b *testing.B) { benchDelivery(b, mode == "inprocess", window) })
		}
	}
}

const (
	benchSubjects = 10_000
	benchWindow   = 10_000
	benchPayload  = 2048
)

func benchDelivery(b *testing.B, inProcess bool, window int) {
	s, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l, err := listener.Dial(ctx, listener.Options{URL: s.ClientURL(), Prefix: "spark"})
	if err != nil {
		b.Fatal(err)
	}
	err = l.EnsureStream(ctx)
	l.Close()
	if err != nil {
		b.Fatal(err)
	}

	pub, err := nats.Connect(s.ClientURL(), nats.Name("bench-publisher"))
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	opts := []nats.Option{nats.Name("bench-subscriber")}
	if inProcess {
		opts = append(opts, nats.InProcessServer(s))
	}
	sub, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	var got atomic.Int64
	delivered := make(chan struct{}, 1)
	subn, err := sub.Subscribe("spark.*.*.*", func(*nats.Msg) {
		got.Add(1)
		select {
		case delivered <- struct{}{}:
		default:
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = subn.SetPendingLimits(-1, -1)
	if err := sub.Flush(); err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(pub)
	if err != nil {
		b.Fatal(err)
	}
	st, err := js.Stream(ctx, listener.DefaultStream)
	if err != nil {
		b.Fatal(err)
	}

	subjects := make([]string, benchSubjects)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("spark.progress.q%08x.r%08x", i, i)
	}
	payload := make([]byte, benchPayload)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	sent := 0
	publish := func(n int) {
		for range n {
			for int64(sent)-got.Load() >= int64(window) {
				time.Sleep(50 * time.Microsecond)
			}
			if err := pub.Publish(subjects[sent%benchSubjects], payload); err != nil {
				b.Fatal(err)
			}
			if window == 1 {
				// One at a time, as at a low rate: every message goes
				// out and is read on its own.
				<-delivered
			}
			sent++
		}
	}
	wait := func() {
		deadline := time.Now().Add(5 * time.Minute)
		for got.Load() < int64(sent) {
			if time.Now().After(deadline) {
				b.Fatalf("delivered %d of %d", got.Load(), sent)
			}
			time.Sleep(100 * time.Microsecond)
		}
		// And stored: the stream stores asynchronously.
		for {
			info, err := st.Info(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if info.State.LastSeq >= uint64(sent) {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("stored %d of %d", info.State.LastSeq, sent)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Every subject holds a message, as in the service's steady state.
	w := window
	window = benchWindow
	publish(benchSubjects)
	window = w
	select {
	case <-delivered:
	default:
	}
	wait()

	b.ReportAllocs()
	b.SetBytes(benchPayload)
	cpu0 := cputime.Process()
	b.ResetTimer()
	publish(b.N)
	wait()
	b.StopTimer()
	b.ReportMetric(float64((cputime.Process()-cpu0).Microseconds())/float64(b.N), "cpu-µs/msg")
	if stats := sub.Stats(); sub.Status() != nats.CONNECTED {
		b.Fatalf("subscriber %v, stats %+v", sub.Status(), stats)
	}
}
