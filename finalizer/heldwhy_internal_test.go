package finalizer

import (
	"strings"
	"testing"
	"time"
)

// TestOneReasonServesAProgressAndAQuietSignal: heldBeforeRewind says why
// a progress (beforeRewind) and a quiet signal (quietBeforeRewind) are
// held in the same words, case for case, each naming what it holds and
// what moves the verdict for it.
func TestOneReasonServesAProgressAndAQuietSignal(t *testing.T) {
	rewound := time.Date(2026, 9, 28, 14, 0, 0, 0, time.UTC)
	prompt := streamMark{seq: 18, recorded: true, rewind: rewound}
	late := streamMark{seq: 18, heard: true, rewind: rewound, readAt: rewound.Add(9 * time.Second), failed: 1}
	base := heldFacts{posted: rewound.Add(-20 * time.Second), at: rewound, rewound: rewound}
	for _, c := range []struct {
		name string
		set  func(*heldFacts)
		want string // with {stored}, {object}: the subject's words
	}{
		{"by a late mark", func(f *heldFacts) { f.seq, f.mark, f.marked, f.storedBefore, f.bySeq = 10, late, true, true, true },
			"{stored} at sequence 10 ({time} at 2026-09-28T13:59:40Z by its driver's clock), at or before sequence 18, the stream's last when this service could read it"},
		{"by a prompt mark", func(f *heldFacts) { f.seq, f.mark, f.marked, f.storedBefore, f.bySeq = 10, prompt, true, true, true },
			"{stored} at sequence 10 ({time} at 2026-09-28T13:59:40Z by its driver's clock), before its table's rewind at 2026-09-28T14:00:00Z (sequence 18"},
		{"by the margin", func(f *heldFacts) { f.stored, f.storedBefore = rewound.Add(30*time.Second), true },
			"{stored} at 2026-09-28T14:00:30Z ({time} at 2026-09-28T13:59:40Z by its driver's clock), before its table was rewound at 2026-09-28T14:00:00Z or within 1m0s after"},
		{"stored after the mark", func(f *heldFacts) { f.seq, f.mark, f.marked = 19, prompt, true },
			"the stream stored {object} after its table's rewind (at sequence 19, after sequence 18"},
		{"stored after the margin", func(f *heldFacts) { f.stored = rewound.Add(2 * time.Minute) },
			"the stream stored {object} at 2026-09-28T14:02:00Z, after its table's rewind"},
		{"by the posted time", func(f *heldFacts) {},
			"{name} {was} at 2026-09-28T13:59:40Z by its driver's clock, before its table was rewound at 2026-09-28T14:00:00Z"},
	} {
		f := base
		c.set(&f)
		for _, s := range []heldSubject{heldProgress, heldQuiet("caught_up")} {
			want := strings.NewReplacer("{stored}", s.name+s.stored, "{object}", s.object, "{time}", s.time, "{name}", s.name, "{was}", s.was).Replace(c.want)
			got := heldBeforeRewind(s, f)
			if !strings.HasPrefix(got, outcomeBeforeRewind+": ") || !strings.Contains(got, want) {
				t.Errorf("%s, %s: %q does not say %q", c.name, s.name, got, want)
			}
			if !strings.Contains(got, "; "+s.next+" posted after the rewind") {
				t.Errorf("%s, %s: %q does not say that %s posted after the rewind moves the verdict", c.name, s.name, got, s.next)
			}
		}
	}
	if got := heldBeforeRewind(heldQuiet("idle_event"), base); !strings.Contains(got, "the run's quiet signal (idle_event) says its source was caught up at 2026-09-28T13:59:40Z") {
		t.Errorf("a quiet signal held by its time says %q", got)
	}
}
