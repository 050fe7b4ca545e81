package listener_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/listener"
)

// TestLastStoredIsTheStreamsNewestStoredTime: LastStored says when the
// stream stored its newest message (zero while it stored none), and a
// message stored after it answered carries a later stored time: the
// threshold a rewind heard live is judged by (finalizer.StreamMarker,
// ADR 0019, addendum of 2026-12-06).
func TestLastStoredIsTheStreamsNewestStoredTime(t *testing.T) {
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	if last, err := l.LastStored(ctx); err != nil || !last.IsZero() {
		t.Fatalf("an empty stream: %v %v, want zero", last, err)
	}
	publishRuns(t, srv.ClientURL(), 2)
	js, err := jetstream.New(rawConn(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, listener.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	newest, err := st.GetLastMsgForSubject(ctx, "spark.progress."+uuid(1, 0)+"."+uuid(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	last, err := l.LastStored(ctx)
	if err != nil || !last.Equal(newest.Time) {
		t.Fatalf("LastStored %v %v, want the newest message's stored time %v", last, err, newest.Time)
	}
	publishRuns(t, srv.ClientURL(), 1) // stored after LastStored answered
	later, err := st.GetLastMsgForSubject(ctx, "spark.progress."+uuid(0, 0)+"."+uuid(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if !later.Time.After(last) {
		t.Fatalf("a message stored after LastStored answered has stored time %v, not after %v", later.Time, last)
	}
}
