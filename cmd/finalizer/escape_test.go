package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/finalizer-dev/finalizer/control"
)

// TestOperatorFlagsRefuseControlCharacters: --by and --reason took ESC and
// other control characters, kept in the audit table and printed raw by
// audit. rewind, acknowledge and feeders retire/unretire refuse them
// before they connect.
func TestOperatorFlagsRefuseControlCharacters(t *testing.T) {
	pg := []string{"--postgres-url", "postgres://127.0.0.1:1/x"}
	for _, args := range [][]string{
		{"rewind", "--table", "t", "--to", "2026-09-28T00:00:00Z", "--reason", "r\x1b[2J"},
		{"rewind", "--table", "t", "--to", "2026-09-28T00:00:00Z", "--reason", "r", "--by", "ops\x1b]0;x\x07"},
		{"acknowledge", "--table", "t", "--reason", "line\nforged"},
		{"feeders", "unretire", "--table", "t", "--query", "q", "--reason", "r", "--by", "a\rb"},
	} {
		code, _, errOut := runCLI(t, append(args, pg...)...)
		if code != 2 || !strings.Contains(errOut, "control character") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and the control character named", args, code, errOut)
		}
	}
}

// TestOperatorFlagsRefuseFormatAndSeparatorCharacters: --reason and --by
// took U+2028 and U+2029 (a new line in many viewers), zero-width and
// invisible characters (U+200B, U+FEFF, U+00AD) and any length, although
// the help said "one line of plain text", and a bidirectional override
// was refused as "the control character U+202E". Each is refused with its
// kind named, and the help of rewind, acknowledge and feeders
// retire/unretire says what is refused.
func TestOperatorFlagsRefuseFormatAndSeparatorCharacters(t *testing.T) {
	pg := []string{"--postgres-url", "postgres://127.0.0.1:1/x"}
	for _, c := range []struct {
		args []string
		kind string
	}{
		{[]string{"feeders", "retire", "--table", "t", "--query", "q", "--reason", "\u202eevil"}, "bidirectional formatting character U+202E"},
		{[]string{"rewind", "--table", "t", "--to", "2026-09-28T00:00:00Z", "--reason", "one\u2028two"}, "line separator U+2028"},
		{[]string{"acknowledge", "--table", "t", "--reason", "one\u2029two"}, "paragraph separator U+2029"},
		{[]string{"acknowledge", "--table", "t", "--reason", "r", "--by", "ops\u200b"}, "invisible formatting character U+200B"},
		{[]string{"feeders", "unretire", "--table", "t", "--query", "q", "--reason", "\ufeffr"}, "invisible formatting character U+FEFF"},
		{[]string{"feeders", "retire", "--table", "t", "--query", "q", "--by", "a\u00adb"}, "invisible formatting character U+00AD"},
		{[]string{"acknowledge", "--table", "t", "--reason", strings.Repeat("x", 1001)}, "1001 bytes long, more than 1000"},
	} {
		code, _, errOut := runCLI(t, append(c.args, pg...)...)
		if code != 2 || !strings.Contains(errOut, c.kind) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args[:2], code, errOut, c.kind)
		}
	}
	for _, args := range [][]string{{"rewind"}, {"acknowledge"}, {"feeders", "retire"}, {"feeders", "unretire"}} {
		_, out, _ := runCLI(t, append(args, "--help")...)
		if !strings.Contains(out, "U+2028") || !strings.Contains(out, "1,000 bytes") {
			t.Errorf("%q --help does not say what --reason and --by refuse:\n%s", args, out)
		}
	}
}

// TestFeederErrorAnswers400ForControlCharacters: the HTTP API's retire
// and unretire answer 400 when the store refuses a reason or by.
func TestFeederErrorAnswers400ForControlCharacters(t *testing.T) {
	w := httptest.NewRecorder()
	feederError(w, control.CheckOperatorText("the reason", "\x1b"), func(http.ResponseWriter, error) {})
	if w.Code != 400 {
		t.Errorf("code %d, want 400", w.Code)
	}
}

// TestPrintedFreeTextIsEscaped: rows written before the input was checked,
// or by hand in SQL, with ESC and newlines in a reason, an operator's name,
// a feeder's query name and its retirement's why: audit, status and
// feeders list print them escaped (\u001b), never raw, and a newline in
// a value does not start a line.
func TestPrintedFreeTextIsEscaped(t *testing.T) {
	url, s := controlDB(t)
	ctx := context.Background()
	advanceTo(t, s, "bronze.orders", "q1", "orders", "r1", statusAt)
	advanceTo(t, s, "bronze.orders", "q2", "orders2", "r2", statusAt)
	if _, err := s.Rewind(ctx, control.Rewind{Table: "bronze.orders", To: statusAt.Add(-1), Reason: "r", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.RetireFeeder(ctx, "bronze.orders", "q2", "done"); err != nil {
		t.Fatal(err)
	}
	execSQL(t, url,
		`UPDATE public.table_finalization_audit SET by_operator = E'ops\x1b[31m', reason = E'why\x1b]0;title\x07\nFORGED'`,
		`UPDATE public.table_finalization_feeds SET query_name = E'name\x1b[2J', retired_why = E'gone\x1b[1A\nFORGED' WHERE feeder = 'q2'`,
		`UPDATE public.table_finalization SET mark = E'mark\x1b[5m\nFORGED'`,
	)
	for _, args := range [][]string{{"audit"}, {"audit", "--json"}, {"status", "--http-url", ""}, {"status", "--http-url", "", "--json"}, {"feeders", "list"}, {"feeders", "list", "--json"}} {
		code, out, errOut := runCLI(t, append(args, "--postgres-url", url)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, errOut)
		}
		if strings.ContainsAny(out, "\x1b\x07\r") {
			t.Errorf("%q printed a raw control character:\n%q", args, out)
		}
		if !strings.Contains(out, `\u001b`) {
			t.Errorf("%q: no escaped ESC:\n%s", args, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "FORGED") {
				t.Errorf("%q: a value's newline started a line:\n%s", args, out)
			}
		}
	}
}

// TestMessagesEscapeTableNames: the "unknown table" error listed the
// tables with a verdict as the database holds them, an escape sequence
// written by hand in SQL included, and a hand-typed --table reached
// stderr or stdout as typed (is-final, wait, status --table, rewind,
// acknowledge). Every error line is escaped as the commands print the
// database's free text, and audit escapes a reason's newline, carriage
// return and tab (\u000a) as status and feeders list do instead of
// folding them to " ; ".
func TestMessagesEscapeTableNames(t *testing.T) {
	url, s := controlDB(t)
	ctx := context.Background()
	advanceTo(t, s, "bronze.orders", "q1", "orders", "r1", statusAt)
	if _, err := s.Acknowledge(ctx, control.Acknowledge{Table: "bronze.orders", Reason: "r", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	execSQL(t, url,
		`INSERT INTO public.table_finalization (table_name, finalized_until) VALUES (E'evil\x1b[2J\u202e', now())`,
		`UPDATE public.table_finalization_audit SET reason = E'one\ntwo\rthree\tfour'`,
	)
	typed := "zz\x1b[2Jtyped\u202e"
	for _, args := range [][]string{
		{"is-final", "--table", "nothing.here", "--period-end", "2026-09-28T00:00:00Z", "--http-url", ""},
		{"wait", "--table", "nothing.here", "--until", "2026-09-28T00:00:00Z", "--http-url", ""},
		{"status", "--table", "nothing.here", "--http-url", ""},
		{"is-final", "--table", typed, "--period-end", "2026-09-28T00:00:00Z", "--http-url", ""},
		{"is-final", "--table", typed, "--period-end", "2026-09-28T00:00:00Z", "--http-url", "", "--allow-missing"},
		{"rewind", "--table", typed, "--to", "2026-09-28T00:00:00Z", "--reason", "r", "--http-url", ""},
		{"acknowledge", "--table", typed, "--reason", "r"},
	} {
		code, out, errOut := runCLI(t, append(args, "--postgres-url", url)...)
		if code == 0 {
			t.Errorf("%q: exit 0", args)
		}
		if strings.ContainsAny(out+errOut, "\x1b\u202e") {
			t.Errorf("%q printed a raw control character: stdout %q, stderr %q", args, out, errOut)
		}
	}
	code, out, errOut := runCLI(t, "audit", "--postgres-url", url)
	if code != 0 || !strings.Contains(out, `one\u000atwo\u000dthree\u0009four`) {
		t.Errorf("audit: exit %d, stdout %q, stderr %q; want the reason's newline escaped", code, out, errOut)
	}
}

// execSQL runs stmts on the database at url, in order, as written by hand.
func execSQL(t *testing.T, url string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
