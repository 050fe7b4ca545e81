package main

import (
	"strings"
	"testing"
)

// realHash is a real bcrypt hash (cost 11) of "spark-b6c1f0e9d2" that the
// old expansion of the raw file turned into "a1".
const realHash = "$2a$11$JSzmxqqqvgjvT5KxSGZhJeRlXaj6aQK6InAzlVnSwAjQ9YGTZgE2O"

func TestExpandValue(t *testing.T) {
	env := map[string]string{"PW": "s3cret", "A_1": "x", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cases := []struct{ in, want, err string }{
		{in: "$PW", want: "s3cret"},
		{in: "${PW}", want: "s3cret"},
		{in: "pre-${A_1}-post", want: "pre-x-post"},
		{in: "$A_1.b", want: "x.b"},
		{in: "$UNSET", want: ""},
		{in: "$$PW", want: "$PW"},
		{in: "a$$$$b", want: "a$$b"},
		{in: "cost $5 or $", want: "cost $5 or $"},
		{in: realHash, want: realHash},
		{in: "$2b$12$" + strings.Repeat("a", 53), want: "$2b$12$" + strings.Repeat("a", 53)},
		{in: "$$2a$$11$$abc", want: "$2a$11$abc"},
		{in: "$2a$11$utwbw5", err: "bcrypt"},
		{in: realHash + "x", err: "bcrypt"},
		{in: "${PW", err: "closing"},
		{in: "${P W}", err: "no variable name"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := expandValue(c.in, lookup)
			switch {
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("err = %v, want %q", err, c.err)
			case c.err == "" && err != nil:
				t.Fatal(err)
			case c.err == "" && got != c.want:
				t.Fatalf("got %q, want %q", got, c.want)
			}
			if err != nil && strings.Contains(err.Error(), c.in) {
				t.Fatalf("the error repeats the value: %v", err)
			}
		})
	}
}

// TestConfigExpandsValuesOnly: a bcrypt hash in the file stays whole (the
// old expansion of the raw text made $2a$11$... "a1"), a variable expands in
// a value, also one typed by what it expands to, never in a key, $$ is a
// $, and a mangled hash is refused with the line. Unknown keys are still
// reported after a bad duration.
func TestConfigExpandsValuesOnly(t *testing.T) {
	t.Setenv("OPS_PW", "ops-pw")
	t.Setenv("INSECURE", "true")
	t.Setenv("STALE", "7m")
	t.Setenv("KEY", "tabels")
	body := `
nats:
  embedded:
    users:
      - {user: spark, password: ` + realHash + `, role: publisher}
      - {user: quoted, password: "` + realHash + `", role: publisher}
      - {user: ops, password: $OPS_PW, role: operator}
      - {user: lit, password: "a$$b", role: operator}
http:
  insecure: $INSECURE
tracking:
  stale_after: ${STALE}
`
	cfg, err := resolveServe(t, "--config", writeConfig(t, body))
	if err != nil {
		t.Fatal(err)
	}
	users := cfg.NATS.Embedded.Users
	if users[0].Password != realHash || users[1].Password != realHash {
		t.Errorf("hash mangled: %q, %q", users[0].Password, users[1].Password)
	}
	if users[2].Password != "ops-pw" || users[3].Password != "a$b" {
		t.Errorf("passwords: %q, %q", users[2].Password, users[3].Password)
	}
	if !cfg.HTTP.Insecure || cfg.Tracking.StaleAfter != Duration(7*60e9) {
		t.Errorf("typed values: insecure %v, stale_after %v", cfg.HTTP.Insecure, cfg.Tracking.StaleAfter)
	}

	_, err = resolveServe(t, "--config", writeConfig(t, "nats:\n  embedded:\n    users:\n      - {user: s, password: $2a$11$utwbw5, role: publisher}\n"))
	if err == nil || !strings.Contains(err.Error(), "line 4") || !strings.Contains(err.Error(), "bcrypt") || !strings.Contains(err.Error(), "password") {
		t.Errorf("mangled hash: %v", err)
	}
	_, err = resolveServe(t, "--config", writeConfig(t, "$KEY: []\n"))
	if err == nil || !strings.Contains(err.Error(), "$KEY") {
		t.Errorf("a key is never expanded: %v", err)
	}
	_, err = resolveServe(t, "--config", writeConfig(t, "tracking: {stale_after: soon}\ntabels: []\n"))
	if err == nil || !strings.Contains(err.Error(), "tabels") {
		t.Errorf("unknown key after a bad duration: %v", err)
	}
}
