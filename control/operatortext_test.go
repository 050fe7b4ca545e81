package control

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestOperatorTextRefusesControlCharacters: a reason or an operator's
// name with ESC (or any control or bidirectional formatting character)
// was kept, and `finalizer audit` printed it to a terminal as it was.
// Retire and unretire (the CLI, HTTP and NATS all call them) refuse it.
func TestOperatorTextRefusesControlCharacters(t *testing.T) {
	for _, bad := range []string{"\x1b[2Jgone", "a\nb", "tab\there", "\u202eevil", "del\x7f", "c1\u0085", "\xff"} {
		if err := CheckOperatorText("--reason", bad); !errors.Is(err, ErrInvalidText) {
			t.Errorf("CheckOperatorText(%q) = %v, want ErrInvalidText", bad, err)
		}
	}
	for _, ok := range []string{"", "backfill done", "Ünïcödé — fine 日本"} {
		if err := CheckOperatorText("--reason", ok); err != nil {
			t.Errorf("CheckOperatorText(%q) = %v", ok, err)
		}
	}
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	until := time.Date(2026, 9, 28, 12, 0, 0, 0, time.UTC)
	for _, q := range []string{"q1", "q2"} {
		if _, _, err := s.Advance(ctx, Advance{Table: "t", FinalizedUntil: until, QueryID: q}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, _, err := s.RetireFeeder(ctx, "t", "q1", "done\x1b]0;owned\x07"); !errors.Is(err, ErrInvalidText) {
		t.Fatalf("retire with ESC in the reason: %v, want ErrInvalidText", err)
	}
	if _, _, _, err := s.RetireFeeder(ctx, "t", "q1", "done"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UnretireFeeder(ctx, "t", "q1", "back", "ops\x1b[31m"); !errors.Is(err, ErrInvalidText) {
		t.Fatalf("unretire with ESC in by: %v, want ErrInvalidText", err)
	}
	if _, _, err := s.UnretireFeeder(ctx, "t", "q1", "back\r", "ops"); !errors.Is(err, ErrInvalidText) {
		t.Fatalf("unretire with CR in the reason: %v, want ErrInvalidText", err)
	}
	fs, err := s.Feeders(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Feeder == "q1" && f.RetiredWhy != "done" {
			t.Errorf("q1's why = %q", f.RetiredWhy)
		}
	}
}

// TestOperatorTextRefusesFormatAndSeparatorCharacters: line and paragraph
// separators and invisible format characters passed, any length passed,
// and a bidirectional override was named "the control character". Each is
// refused with its kind; 1,000 bytes pass, 1,001 do not.
func TestOperatorTextRefusesFormatAndSeparatorCharacters(t *testing.T) {
	for bad, kind := range map[string]string{
		"a\u2028b": "line separator U+2028", "a\u2029b": "paragraph separator U+2029",
		"a\u200bb": "invisible formatting character U+200B", "\ufeffa": "invisible formatting character U+FEFF",
		"a\u00adb": "invisible formatting character U+00AD", "\u202eevil": "bidirectional formatting character U+202E",
		"\x1b": "control character U+001B", strings.Repeat("é", 501): "1002 bytes long",
	} {
		err := CheckOperatorText("--reason", bad)
		if !errors.Is(err, ErrInvalidText) || !strings.Contains(err.Error(), kind) {
			t.Errorf("CheckOperatorText(%q) = %v, want ErrInvalidText naming %q", bad, err, kind)
		}
	}
	if err := CheckOperatorText("--reason", strings.Repeat("x", MaxOperatorText)); err != nil {
		t.Errorf("1,000 bytes: %v", err)
	}
}
