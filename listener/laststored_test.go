package listener_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/listener"
)

// TestStreamPositionIsTheStreamsLastSequence: StreamPosition says the
// stream's last sequence (0 while it stored none) and when the stream was
// created; a message stored after it answered carries a later sequence:
// the threshold a rewind is judged by (finalizer.StreamMarker, ADR 0019,
// addendum of 2026-12-06, "judged by sequence"). A stream deleted and
// created again has another creation time, and its sequences start again.
func TestStreamPositionIsTheStreamsLastSequence(t *testing.T) {
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	empty, err := l.StreamPosition(ctx)
	if err != nil || empty.LastSeq != 0 || empty.Created.IsZero() {
		t.Fatalf("an empty stream: %+v %v, want sequence 0 and its creation time", empty, err)
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
	pos, err := l.StreamPosition(ctx)
	if err != nil || pos.LastSeq < newest.Sequence || !pos.Created.Equal(empty.Created) {
		t.Fatalf("StreamPosition %+v %v, want at least the newest progress's sequence %d, created %v", pos, err, newest.Sequence, empty.Created)
	}
	// The listing and a run's read say the sequence of the run's newest
	// event, by which a run silent since a rewind is judged.
	runs, err := l.Retained(ctx)
	if err != nil || len(runs) != 2 {
		t.Fatalf("Retained: %+v %v", runs, err)
	}
	for _, run := range runs {
		one, found, err := l.RetainedRun(ctx, run.QueryID, run.RunID)
		if err != nil || !found || run.Seq == 0 || run.Seq > pos.LastSeq || one.Seq != run.Seq {
			t.Fatalf("run %s: listed at sequence %d, read at %d (%v %v); want the same, within 1..%d", run.RunID, run.Seq, one.Seq, found, err, pos.LastSeq)
		}
	}
	if runs[1].RunID == uuid(1, 1) && runs[1].Seq < newest.Sequence {
		t.Fatalf("run %s listed at sequence %d, before its progress's %d", runs[1].RunID, runs[1].Seq, newest.Sequence)
	}
	publishRuns(t, srv.ClientURL(), 1) // stored after StreamPosition answered
	later, err := st.GetLastMsgForSubject(ctx, "spark.progress."+uuid(0, 0)+"."+uuid(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if later.Sequence <= pos.LastSeq {
		t.Fatalf("a message stored after StreamPosition answered has sequence %d, not after %d", later.Sequence, pos.LastSeq)
	}
	// Deleted and created again: another incarnation.
	if err := js.DeleteStream(ctx, listener.DefaultStream); err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := l.StreamPosition(ctx)
	if err != nil || again.LastSeq != 0 || again.Created.Equal(pos.Created) {
		t.Fatalf("the stream created again: %+v %v, want sequence 0 and a creation time other than %v", again, err, pos.Created)
	}
}
