package control

import (
	"encoding/json"
	"testing"
	"time"
)

// movePayload is a move's notification exactly as the statements build
// it: payloadPrefix, the time as rfc3339 writes it, notifyEnd.
func movePayload(t testing.TB, table, until, control string) string {
	t.Helper()
	prefix, err := payloadPrefix(table)
	if err != nil {
		t.Fatal(err)
	}
	return prefix + until + notifyEnd(control)
}

// checkReadNotification fails unless readNotification returns exactly
// what json.Unmarshal returns for payload (the error or not, and the
// notification), and reports whether the fast path read it.
func checkReadNotification(t *testing.T, payload string) (fast bool) {
	t.Helper()
	var want notification
	wantErr := json.Unmarshal([]byte(payload), &want)
	got, gotErr := readNotification(payload)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("readNotification(%q): error %v, json.Unmarshal: %v", payload, gotErr, wantErr)
	}
	if wantErr == nil && got != want {
		t.Fatalf("readNotification(%q) = %+v, json.Unmarshal: %+v", payload, got, want)
	}
	_, fast = fastNotification(payload)
	return fast
}

// The payloads the statements send take the fast path, and every payload
// reads as json.Unmarshal reads it.
func TestReadNotification(t *testing.T) {
	for _, tc := range []struct {
		name, payload string
		fast          bool
	}{
		{"a move", movePayload(t, "silver.orders", "2026-09-28T14:05:00Z", "public.finalizer_control"), true},
		{"microseconds", movePayload(t, "silver.orders", "2026-09-28T14:05:00.123456Z", "public.finalizer_control"), true},
		{"unicode table", movePayload(t, "silver.ordres_é", "2026-09-28T14:05:00Z", "public.finalizer_control"), true},
		{"an earlier release's move, no control table", `{"table":"t","finalized_until":"2026-09-28T14:05:00Z"}`, true},
		{"empty table", `{"table":"","finalized_until":"2026-09-28T14:05:00Z","control_table":"a.b"}`, true},
		{"a table Go escapes (<, >, &)", movePayload(t, "a<b>&c", "2026-09-28T14:05:00Z", "s.c"), false},
		{"a quote in the table", movePayload(t, `a"b`, "2026-09-28T14:05:00Z", "s.c"), false},
		{"a backslash in the control table", movePayload(t, "t", "2026-09-28T14:05:00Z", `s\c`), false},
		{"a rewind", `{"table":"t","finalized_until":"2026-09-28T14:05:00Z","rewound":true,"control_table":"s.c","from":"2026-09-28T15:00:00Z"}`, false},
		{"keys in another order", `{"finalized_until":"2026-09-28T14:05:00Z","table":"t"}`, false},
		{"keys in another case", `{"Table":"t","finalized_until":"2026-09-28T14:05:00Z"}`, false},
		{"a duplicate key", `{"table":"t","finalized_until":"2026-09-28T14:05:00Z","control_table":"s.c","table":"u"}`, false},
		{"spaces", `{"table": "t", "finalized_until": "2026-09-28T14:05:00Z"}`, false},
		{"trailing space", `{"table":"t","finalized_until":"2026-09-28T14:05:00Z"} `, false},
		{"trailing garbage", `{"table":"t","finalized_until":"2026-09-28T14:05:00Z"}x`, false},
		{"truncated", `{"table":"t","finalized_until":"2026-09-28T14:05:00Z`, false},
		{"truncated in the table", `{"table":"t`, false},
		{"invalid UTF-8 in the table", "{\"table\":\"a\xffb\",\"finalized_until\":\"2026-09-28T14:05:00Z\"}", false},
		{"a control character", "{\"table\":\"a\tb\",\"finalized_until\":\"2026-09-28T14:05:00Z\"}", false},
		{"not a time (read as a string all the same)", `{"table":"t","finalized_until":"soon"}`, true},
		{"a marker", `marker`, false},
		{"empty", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if fast := checkReadNotification(t, tc.payload); fast != tc.fast {
				t.Fatalf("fast path for %q: %v, want %v", tc.payload, fast, tc.fast)
			}
		})
	}
}

// FuzzReadNotification: whatever the payload (anyone who may NOTIFY on
// the channel can send one), readNotification agrees with json.Unmarshal.
func FuzzReadNotification(f *testing.F) {
	for _, p := range []string{
		movePayload(f, "silver.orders", "2026-09-28T14:05:00Z", "public.finalizer_control"),
		movePayload(f, "silver.orders", "2026-09-28T14:05:00.5Z", "s.c"),
		movePayload(f, "a<b", "2026-09-28T14:05:00Z", "s.c"),
		`{"table":"t","finalized_until":"2026-09-28T14:05:00Z"}`,
		`{"table":"t","finalized_until":"2026-09-28T14:05:00Z","rewound":true,"control_table":"s.c","from":"x"}`,
		"{\"table\":\"a\xffb\",\"finalized_until\":\"x\"}",
		`{"table":"t\u00e9","finalized_until":"x"}`,
		`marker`,
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		checkReadNotification(t, payload)
	})
}

// The fast path is what the service's LISTEN connection pays per moved
// verdict.
func BenchmarkReadNotification(b *testing.B) {
	p := movePayload(b, "silver.orders", time.Date(2026, 9, 28, 14, 5, 0, 0, time.UTC).Format(time.RFC3339Nano), "public.finalizer_control")
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := readNotification(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var n notification
			if err := json.Unmarshal([]byte(p), &n); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// slowPayloadPrefix is payloadPrefix through encoding/json alone.
func slowPayloadPrefix(table string) string {
	b, _ := json.Marshal(notification{Table: table})
	return string(b[:len(b)-len(`"}`)])
}

// payloadPrefix writes what encoding/json writes, for plain names and
// the others.
func TestPayloadPrefix(t *testing.T) {
	for _, table := range []string{"silver.orders", "t", "", "a b", "a<b", "a>b", "a&b", `a"b`, `a\b`, "a\tb", "a\x7fb", "ordres_é", "a\u2028b", "x\xffy"} {
		got, err := payloadPrefix(table)
		if err != nil {
			t.Fatal(err)
		}
		if want := slowPayloadPrefix(table); got != want {
			t.Fatalf("payloadPrefix(%q) = %s, encoding/json: %s", table, got, want)
		}
	}
}

func FuzzPayloadPrefix(f *testing.F) {
	for _, s := range []string{"silver.orders", "a<b", `a"b`, "a\x7fb", "ordres_é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, table string) {
		got, err := payloadPrefix(table)
		if err != nil {
			t.Fatal(err)
		}
		if want := slowPayloadPrefix(table); got != want {
			t.Fatalf("payloadPrefix(%q) = %s, encoding/json: %s", table, got, want)
		}
	})
}
