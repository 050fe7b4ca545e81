package listener_test

import (
	"testing"

	"github.com/finalizer-dev/finalizer/listener"
)

// A restart's recovery names the runs whose table another recovered query
// also feeds (OfferLate): under the hold they get nothing of their
// snapshot before the release, which then offers them everything, as
// before the early offer; the other runs are offered their snapshot at
// once. Without a hold OfferLate does nothing.
func TestOfferLateWaitsForTheRelease(t *testing.T) {
	n := 2 * listener.BatchCatchUpMin
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{})
	ctx := ctxT(t)
	if err := l.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	publishRuns(t, srv.ClientURL(), n)
	l.OfferLate([]string{uuid(0, 1)}) // no hold: nothing to remember

	release := l.HoldCatchUps()
	if _, err := l.Retained(ctx); err != nil {
		t.Fatal(err)
	}
	late := map[int]bool{1: true, 4: true}
	var ids []string
	for i := range late {
		ids = append(ids, uuid(i, 1))
	}
	l.OfferLate(ids)
	boxes := subscribeRuns(t, l, n)
	for i, b := range boxes {
		m := b.Take()
		switch {
		case late[i] && (m.Progress != nil || m.Started != nil):
			t.Fatalf("run %d, offered late, took %+v before the release", i, m)
		case !late[i] && (m.Progress == nil || m.Started == nil):
			t.Fatalf("run %d took %+v before the release, want its snapshot's started event and progress", i, m)
		}
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range late {
		if m := boxes[i].Take(); m.Progress == nil || m.Progress.BatchID != 7 || m.Started == nil {
			t.Fatalf("run %d at the release: took %+v, want its started event and batch 7", i, m)
		}
	}

}
