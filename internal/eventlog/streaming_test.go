package eventlog_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/finalizer-dev/finalizer/internal/eventlog"
	"github.com/finalizer-dev/finalizer/progress"
)

func TestStreaming(t *testing.T) {
	const (
		queryID = "8d268dc2-bc9c-4be8-97a9-b135d2943028"
		runID   = "e225d92f-2545-48f8-87a2-9c0309580f8a"
	)
	lines := sparkLines(t)
	path := filepath.Join(t.TempDir(), appID)
	writeFile(t, path, joinLines(lines))

	var kinds []progress.Kind
	var batches []int64
	for _, l := range readAll(t, open(t, path, eventlog.Options{})) {
		ev, ok, err := eventlog.Streaming(l.Data)
		if err != nil {
			t.Fatalf("line %d: %v", l.Number, err)
		}
		if !ok {
			continue
		}
		if ev.QueryID != queryID || ev.RunID != runID {
			t.Errorf("line %d: ids %s/%s", l.Number, ev.QueryID, ev.RunID)
		}
		kinds = append(kinds, ev.Kind)
		if ev.Kind == progress.KindProgress {
			batches = append(batches, ev.BatchID)
		}
	}
	// The file holds one QueryStartedEvent and eight QueryProgressEvents
	// (batches 0-7) among application lines.
	if len(kinds) != 9 || kinds[0] != progress.KindStarted {
		t.Fatalf("kinds = %v, want started then 8 progress", kinds)
	}
	for i, b := range batches {
		if b != int64(i) {
			t.Fatalf("batch ids = %v, want 0..7", batches)
		}
	}

	cases := []struct {
		name    string
		line    string
		keep    bool
		kind    progress.Kind
		malform bool
	}{
		{"blank", "  ", false, 0, false},
		{"other event", `{"Event":"SparkListenerTaskEnd","Stage ID":0,"Task Info":{}}`, false, 0, false},
		{"other event not even valid JSON after the class", `{"Event":"SparkListenerJobStart",`, false, 0, false},
		{"idle", `{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryIdleEvent","id":"` + queryID + `","runId":"` + runID + `","timestamp":"2024-01-01T00:00:00.000Z"}`, true, progress.KindIdle, false},
		{"terminated", `{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryTerminatedEvent","id":"` + queryID + `","runId":"` + runID + `","exception":null,"errorClassOnException":null}`, true, progress.KindTerminated, false},
		{"listener form progress", `{"id":"` + queryID + `","runId":"` + runID + `","name":null,"timestamp":"2024-01-01T00:00:00.000Z","batchId":3,"sources":[]}`, true, progress.KindProgress, false},
		{"malformed streaming line", `{"Event":"org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent","progress":`, false, 0, true},
		{"not JSON", `hello`, false, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, ok, err := eventlog.Streaming([]byte(c.line))
			if c.malform != errors.Is(err, progress.ErrMalformed) || (!c.malform && err != nil) {
				t.Fatalf("err = %v, want malformed %v", err, c.malform)
			}
			if ok != c.keep {
				t.Fatalf("ok = %v, want %v", ok, c.keep)
			}
			if ok && ev.Kind != c.kind {
				t.Fatalf("kind = %v, want %v", ev.Kind, c.kind)
			}
		})
	}
}
