package listener_test

import (
	"sync"
	"testing"

	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// DiscoverySubscription.Rescan offers the runs the stream retains that
// known does not know to found, off the caller's goroutine, so that a
// caller that dropped a run (too many waiting for a decision) finds it
// without waiting for the run's next event.
func TestDiscoveryRescan(t *testing.T) {
	srv := startNATS(t)
	l := dial(t, srv.ClientURL(), listener.Options{})
	if err := l.EnsureStream(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	q := uuid(21, 0)
	runs := []string{uuid(21, 1), uuid(21, 2), uuid(21, 3)}
	var (
		mu     sync.Mutex
		known  = map[string]bool{}
		found  = map[string]int{}
		taking bool // found takes runs only from here on
	)
	s, err := l.Discover(func(runID string) bool {
		mu.Lock()
		defer mu.Unlock()
		return known[runID]
	}, func(r listener.Run) {
		mu.Lock()
		defer mu.Unlock()
		found[r.RunID]++
		if taking {
			known[r.RunID] = true
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Unsubscribe() }()
	// Seen live and dropped (found does not take them yet).
	for i, r := range runs {
		publish(t, l, progress.KindProgress, q, r, "rescanned", int64(i))
	}
	eventually(t, "every run seen live", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(found) == len(runs)
	})
	mu.Lock()
	known[runs[0]] = true // decided meanwhile
	taking = true
	mu.Unlock()
	s.Rescan()
	s.Rescan() // asked twice before it runs: served once or twice, never lost
	eventually(t, "the runs not known found again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return found[runs[1]] >= 2 && found[runs[2]] >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if found[runs[0]] != 1 {
		t.Fatalf("the known run was offered %d times; want once (live)", found[runs[0]])
	}
}
