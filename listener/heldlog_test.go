package listener

import (
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/finalizer-dev/finalizer/internal/lograte"
	"github.com/finalizer-dev/finalizer/progress"
)

// TestDroppedBurstCountIsSaid (ADR 0022, addendum of 2026-12-06): a lone
// burst of dropped events logs one WARN line per outcome and kind and
// holds back the others; once the interval has ended, the listener's
// report (maintain's, every lograte.ReportEvery) says how many, once, at
// WARN, with the class. Before, the count vanished when no later drop of
// the class came.
func TestDroppedBurstCountIsSaid(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	core, logs := observer.New(zapcore.InfoLevel)
	o := Options{}.withDefaults()
	prefix, _ := splitPrefix(o.Prefix)
	l := &Listener{opts: o, log: zap.New(core), prefix: prefix, warn: lograte.New(clock, DefaultWarnEvery)}
	es := eventSubject{kind: progress.KindProgress, kindToken: "progress", queryID: rawQuery, runID: rawRun}
	for range 20 {
		l.drop(es, "finalizer.progress."+rawQuery+"."+rawRun, OutcomeMalformed, errors.New("no usable time"))
	}
	if n := logs.FilterMessage("event dropped").Len(); n != 1 {
		t.Fatalf("%d drop lines, want 1", n)
	}
	l.reportHeld(false)
	if n := logs.FilterMessage(lograte.HeldMsg).Len(); n != 0 {
		t.Fatalf("%d held lines within the interval", n)
	}
	mu.Lock()
	now = now.Add(DefaultWarnEvery)
	mu.Unlock()
	l.reportHeld(false)
	l.reportHeld(false)
	held := logs.FilterMessage(lograte.HeldMsg).All()
	if len(held) != 1 {
		t.Fatalf("%d held lines, want 1", len(held))
	}
	if m := held[0].ContextMap(); held[0].Level != zapcore.WarnLevel || m["kind"] != "listener" || m["class"] != OutcomeMalformed+"/progress" || m["suppressed"] != int64(19) {
		t.Errorf("held line: %v %v", held[0].Level, m)
	}
}
