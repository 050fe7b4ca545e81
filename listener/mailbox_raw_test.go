package listener

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/internal/lograte"
	"github.com/finalizer-dev/finalizer/progress"
)

const (
	rawQuery = "8d268dc2-bc9c-4be8-97a9-b135d2943028"
	rawRun   = "e225d92f-2545-48f8-87a2-9c0309580f8a"
)

// rawRig is a run subscription without a connection: what the router
// hands to it, and the outcomes it counts.
type rawRig struct {
	sub    *RunSubscription
	box    *Mailbox
	mu     sync.Mutex
	counts map[string]int
	parsed int
}

func newRawRig(t *testing.T) *rawRig {
	t.Helper()
	r := &rawRig{box: NewMailbox(), counts: map[string]int{}}
	o := Options{OnEvent: func(k progress.Kind, outcome string) {
		r.mu.Lock()
		r.counts[k.String()+"/"+outcome]++
		r.mu.Unlock()
	}}.withDefaults()
	prefix, _ := splitPrefix(o.Prefix)
	l := &Listener{opts: o, log: zap.NewNop(), prefix: prefix, warn: lograte.New(time.Now, DefaultWarnEvery)}
	l.parse = func(d []byte, k progress.Kind) (*progress.Event, error) {
		r.mu.Lock()
		r.parsed++
		r.mu.Unlock()
		return progress.Parse(d, k)
	}
	r.sub = &RunSubscription{subscription: subscription{l: l}, queryID: rawQuery, runID: rawRun, box: r.box}
	return r
}

// doc is a progress of the rig's run; runID "" means the rig's.
func doc(batch int64, runID string) []byte {
	if runID == "" {
		runID = rawRun
	}
	ts := time.Date(2026, 9, 28, 13, 0, 0, 0, time.UTC).Add(time.Duration(batch) * time.Minute).Format("2006-01-02T15:04:05.000Z")
	return fmt.Appendf(nil, `{"id":%q,"runId":%q,"name":"q","timestamp":%q,"batchId":%d,`+
		`"sources":[{"description":"s","startOffset":null,"endOffset":{"commit_ts":%q}}],"eventTime":{}}`,
		rawQuery, runID, ts, batch, ts)
}

// dupBatch is a progress of the rig's run with "batchId" twice: first, then
// last.
func dupBatch(first, last int64) []byte {
	d := doc(last, "")
	return append([]byte(fmt.Sprintf(`{"batchId":%d,`, first)), d[1:]...)
}

// escBatch is dupBatch with the second key spelled with a \u escape.
func escBatch(first, last int64) []byte {
	d := doc(last, "")
	d = []byte(strings.Replace(string(d), `"batchId"`, `"batch\u0049d"`, 1))
	return append([]byte(fmt.Sprintf(`{"batchId":%d,`, first)), d[1:]...)
}

func (r *rawRig) live(data []byte) { r.sub.deliver("spark.progress."+rawQuery+"."+rawRun, data) }

func (r *rawRig) stats() (parsed int, counts map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := map[string]int{}
	for k, v := range r.counts {
		c[k] = v
	}
	return r.parsed, c
}

// The unparsed slot keeps what the parsed one kept: the newest batch,
// nothing older than what was taken, and a bad message never hides a good
// one that arrived after it. Only what a Take hands out, and what a
// conflict needs checked, is parsed.
func TestMailboxRawSlot(t *testing.T) {
	type step struct {
		live   []byte          // a live message through deliver
		parsed *progress.Event // an Offer of a parsed event (catch-up, discovery)
		take   bool
	}
	ev := func(b int64) *progress.Event {
		e, err := progress.Parse(doc(b, ""), progress.KindProgress)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	badRun := "00000000-0000-4000-8000-000000000000"
	bad := func(b int64) []byte { return fmt.Appendf(nil, `{"batchId":%d,"runId":"%s","id":"nope"`, b, rawRun) }
	tests := []struct {
		name       string
		steps      []step
		wantBatch  int64 // -100: no progress
		wantNewer  bool  // Mail.NotNewer
		wantParsed int
		wantCounts map[string]int
	}{
		{"newer replaces unparsed", []step{{live: doc(1, "")}, {live: doc(2, "")}, {live: doc(3, "")}}, 3, false, 1,
			map[string]int{"progress/accepted": 1, "progress/superseded": 2}},
		{"older than waiting checks the waiting one", []step{{live: doc(5, "")}, {live: doc(3, "")}}, 5, true, 1,
			map[string]int{"progress/accepted": 1, "progress/superseded": 1}},
		// The bad one replaced 5, which was kept as its fallback: 5 is used,
		// and 3, older, is only noted (NotNewer).
		{"a bad waiting one does not hide a later good one", []step{{live: doc(5, "")}, {live: []byte(`{"batchId":9,"runId":"` + rawRun + `","id":"nope"`)}, {live: doc(3, "")}}, 5, true, 2,
			map[string]int{"progress/accepted": 1, "progress/superseded": 1, "progress/malformed": 1}},
		{"a bad newest falls back to the good one it replaced", []step{{live: doc(5, "")}, {live: []byte(`{"batchId":9,"runId":"` + rawRun + `","id":"nope"`)}}, 5, false, 2,
			map[string]int{"progress/accepted": 1, "progress/malformed": 1}},
		{"a bad newest falls back to a parsed one it replaced", []step{{parsed: ev(5)}, {live: []byte(`{"batchId":9,"runId":"` + rawRun + `","id":"nope"`)}}, 5, false, 1,
			map[string]int{"progress/malformed": 1}},
		// Issue 18, bug 6: two bad messages in a row after a good one.
		{"two bad newest fall back to the good one", []step{{live: doc(5, "")}, {live: bad(9)}, {live: bad(10)}}, 5, false, 3,
			map[string]int{"progress/accepted": 1, "progress/malformed": 2}},
		{"two bad newest fall back to a parsed one", []step{{parsed: ev(5)}, {live: bad(9)}, {live: bad(10)}}, 5, false, 2,
			map[string]int{"progress/malformed": 2}},
		{"bad, good, bad: the good one between", []step{{parsed: ev(5)}, {live: bad(9)}, {live: doc(10, "")}, {live: bad(11)}}, 10, false, 2,
			map[string]int{"progress/accepted": 1, "progress/malformed": 1, "progress/superseded": 1}},
		{"a good newest drops the fallback unparsed", []step{{live: doc(5, "")}, {live: doc(6, "")}, {live: doc(7, "")}}, 7, false, 1,
			map[string]int{"progress/accepted": 1, "progress/superseded": 2}},
		{"older than taken", []step{{live: doc(5, "")}, {take: true}, {live: doc(4, "")}}, -100, true, 1,
			map[string]int{"progress/accepted": 1, "progress/superseded": 1}},
		{"duplicate of taken", []step{{live: doc(5, "")}, {take: true}, {live: doc(5, "")}}, -100, true, 2,
			map[string]int{"progress/accepted": 2}},
		{"newer than parsed waiting", []step{{parsed: ev(5)}, {live: doc(6, "")}}, 6, false, 1,
			map[string]int{"progress/accepted": 1}},
		{"older than parsed waiting", []step{{parsed: ev(5)}, {live: doc(4, "")}}, 5, true, 0,
			map[string]int{"progress/superseded": 1}},
		{"parsed older than unparsed", []step{{live: doc(5, "")}, {parsed: ev(3)}}, 5, true, 1,
			map[string]int{"progress/accepted": 1}},
		{"parsed newer than unparsed", []step{{live: doc(5, "")}, {parsed: ev(7)}}, 7, false, 0,
			map[string]int{"progress/superseded": 1}},
		{"payload of another run is parsed at once", []step{{live: doc(5, badRun)}}, -100, false, 1,
			map[string]int{"progress/mismatch": 1}},
		// Issue 9, item 5: a message with two batchId keys peeked as its
		// first (999) and parsed as its last; the good batch 6 after it
		// was superseded and never applied. Now neither reader takes it.
		{"duplicate batchId keys never hide the good one after", []step{{live: dupBatch(999, 5)}, {live: doc(6, "")}}, 6, false, 2,
			map[string]int{"progress/accepted": 1, "progress/malformed": 1}},
		{"an escaped batchId key is not peeked", []step{{live: escBatch(999, 5)}, {live: doc(6, "")}}, 6, false, 2,
			map[string]int{"progress/accepted": 1, "progress/malformed": 1}},
		{"bad but peekable, alone", []step{{live: []byte(`{"batchId":9,"runId":"` + rawRun + `"`)}}, -100, false, 1,
			map[string]int{"progress/malformed": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRawRig(t)
			for _, s := range tt.steps {
				switch {
				case s.take:
					r.box.Take()
				case s.parsed != nil:
					r.box.Offer(s.parsed)
				default:
					r.live(s.live)
				}
			}
			m := r.box.Take()
			got := int64(-100)
			if m.Progress != nil {
				got = m.Progress.BatchID
			}
			if got != tt.wantBatch || m.NotNewer != tt.wantNewer || m.Idle {
				t.Errorf("took batch %d not-newer %v idle %v, want %d not-newer %v idle false", got, m.NotNewer, m.Idle, tt.wantBatch, tt.wantNewer)
			}
			parsed, counts := r.stats()
			if parsed != tt.wantParsed || fmt.Sprint(counts) != fmt.Sprint(tt.wantCounts) {
				t.Errorf("parsed %d, counted %v; want %d, %v", parsed, counts, tt.wantParsed, tt.wantCounts)
			}
		})
	}
}

func TestPeekProgress(t *testing.T) {
	tests := []struct {
		name  string
		doc   string
		batch int64
		ok    bool
	}{
		{"listener form", string(doc(42, "")), 42, true},
		{"event-log form", `{"Event":"x$QueryProgressEvent","progress":{"id":"q","runId":"` + rawRun + `","batchId" : 7 }}`, 7, true},
		{"upper-case run id", `{"runId":"E225D92F-2545-48F8-87A2-9C0309580F8A","batchId":1}`, 1, true},
		{"negative", `{"runId":"` + rawRun + `","batchId":-1,}`, -1, true},
		{"other run", `{"runId":"e225d92f-2545-48f8-87a2-9c0309580f8b","batchId":1}`, 0, false},
		{"no run id", `{"batchId":1}`, 0, false},
		{"fraction", `{"runId":"` + rawRun + `","batchId":1.5}`, 0, false},
		{"string batch", `{"runId":"` + rawRun + `","batchId":"1"}`, 0, false},
		{"too long", `{"runId":"` + rawRun + `","batchId":12345678901234567890}`, 0, false},
		{"key in a string", `{"name":"\"batchId\":5","runId":"` + rawRun + `"}`, 0, false},
		{"truncated", `{"runId":"` + rawRun + `","batchId":12`, 0, false},
		{"batchId twice", string(dupBatch(999, 5)), 0, false},
		{"batchId nested before its own", `{"x":{"batchId":999},"runId":"` + rawRun + `","batchId":5}`, 0, false},
		{"runId twice", `{"runId":"` + rawRun + `","batchId":5,"runId":"` + rawRun + `"}`, 0, false},
		{"a key spelled with an escape", string(escBatch(999, 5)), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, ok := peekProgress([]byte(tt.doc), rawRun)
			if b != tt.batch || ok != tt.ok {
				t.Errorf("peekProgress = %d, %v; want %d, %v", b, ok, tt.batch, tt.ok)
			}
		})
	}
}

// A live progress older than the one taken, arriving unparsed at a quiet
// mailbox, is counted superseded and only stamped: it wakes nobody and
// leaves nothing for Take. A newer one still wakes.
func TestRawOlderProgressStampedWhenQuiet(t *testing.T) {
	r := newRawRig(t)
	var wakes, stamps int
	r.box.SetNotify(func(stampOnly bool) {
		if stampOnly {
			stamps++
		} else {
			wakes++
		}
	})
	r.live(doc(5, ""))
	if mail := r.box.Take(); mail.Progress == nil || mail.Progress.BatchID != 5 {
		t.Fatalf("Take = %+v, want batch 5", mail)
	}
	r.box.SetQuiet(true)
	r.live(doc(4, ""))
	if mail := r.box.Take(); mail.Progress != nil || mail.NotNewer || wakes != 1 || stamps != 1 {
		t.Fatalf("quiet: Take = %+v, wakes %d, stamps %d; want empty, 1, 1", mail, wakes, stamps)
	}
	if _, counts := r.stats(); counts["progress/superseded"] != 1 {
		t.Fatalf("counts %v, want one progress superseded", counts)
	}
	r.box.SetQuiet(true)
	r.live(doc(6, ""))
	if mail := r.box.Take(); mail.Progress == nil || mail.Progress.BatchID != 6 || wakes != 2 {
		t.Fatalf("Take = %+v, wakes %d; want batch 6, 2", mail, wakes)
	}
}
