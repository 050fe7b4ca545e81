package finalizer

import (
	"context"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/listener"
)

// A Stop that comes before begin (the registry publishes a tracker to
// Stop, for a supersede or Close, just before it begins it) is kept, not
// submitted to the pool the tracker does not have yet: begin's first step
// sees it and the tracker exits. Before, the Stop submitted the tracker to
// a nil pool (the race detector saw the write of the pool in begin and its
// read in the Stop's submit).
func TestStopBeforeBegin(t *testing.T) {
	box := listener.NewMailbox()
	tr := newTracker(TrackerConfig{QueryID: "q", RunID: "r", Table: "t", Box: box})
	tr.Stop()
	box.Offer(nil)
	p := newPool(1)
	p.keep = 0
	tr.begin(context.Background(), p, nil)
	select {
	case <-tr.done.wait():
	case <-time.After(5 * time.Second):
		t.Fatal("the tracker did not exit after a Stop made before it began")
	}
}
