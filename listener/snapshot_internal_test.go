package listener

import (
	"testing"
	"time"
)

// A snapshot is used by a release only for the stream it read, and only
// while the stream's sequences have not gone back below what it read: a
// server that lost the end of an R1 stream in persist_mode async (killed,
// restarted) stores the next messages at sequences the snapshot read, and
// a scan from after the snapshot would miss them.
func TestSnapshotUsable(t *testing.T) {
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	snap := &retainedSnapshot{created: created, last: 1000}
	for _, c := range []struct {
		name    string
		created time.Time
		lastSeq uint64
		want    bool
	}{
		{"nothing stored since", created, 1000, true},
		{"stored since", created, 1500, true},
		{"another stream", created.Add(time.Second), 1500, false},
		{"the end of the stream lost", created, 990, false},
		{"the end lost, nothing stored", created, 0, false},
	} {
		if got := snapshotUsable(snap, c.created, c.lastSeq); got != c.want {
			t.Errorf("%s: usable %v, want %v", c.name, got, c.want)
		}
	}
	// A snapshot of an empty stream: anything since is after it.
	if !snapshotUsable(&retainedSnapshot{created: created}, created, 0) {
		t.Error("the snapshot of an empty stream not usable on the same empty stream")
	}
}
