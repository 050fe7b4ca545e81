package finalizer

import (
	"strings"
	"testing"
)

// expandTable is strings.NewReplacer("{name}", name, "{id}", id).Replace
// without the replacer: the same output for every template, placeholders
// inside the values, adjacent, unclosed or unknown braces included.
func TestExpandTableIsTheReplacer(t *testing.T) {
	templates := []string{"", "bronze.orders", "{name}", "{id}", "t_{id}_{name}", "{name}{id}{name}", "{", "}", "{{name}}",
		"{nam}", "{name", "a{b}c{id", "x.{unknown}.{id}", "{id}{", "{{{id}}}", "{na{name}me}"}
	values := []string{"", "q", "{id}", "{name}", "{", "a}b", "ingest/orders"}
	for _, tpl := range templates {
		for _, name := range values {
			for _, id := range values {
				want := strings.NewReplacer("{name}", name, "{id}", id).Replace(tpl)
				if got := expandTable(tpl, name, id); got != want {
					t.Errorf("expandTable(%q, %q, %q) = %q, want %q", tpl, name, id, got, want)
				}
			}
		}
	}
}

func TestExpandTableAllocatesOnlyItsResult(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = expandTable("bronze.orders", "n", "i") }); n != 0 {
		t.Errorf("a template without placeholders: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = expandTable("t_{name}_{id}", "orders", "8d268dc2") }); n != 1 {
		t.Errorf("a template with placeholders: %v allocations, want 1 (the result)", n)
	}
}

// FuzzExpandTableIsTheReplacer: for any template and any values (braces,
// placeholders and invalid UTF-8 in each), expandTable writes what the
// replacer it replaced wrote. The seeds run with every go test; go test
// -fuzz=FuzzExpandTableIsTheReplacer ./finalizer/ searches further.
func FuzzExpandTableIsTheReplacer(f *testing.F) {
	for _, s := range [][3]string{
		{"t_{id}_{name}", "orders", "8d268dc2"},
		{"{name}{id}{name}", "{id}", "{name}"},
		{"{{name}}{{id}}", "}{", "{"},
		{"{na{name}me}{i{id}d}", "na", "i"},
		{"\xff{name}\xfe{id", "\xff{", "}\xfe"},
		{"{nam{e}{id}}", "{name}", ""},
		{"{{{{", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, tpl, name, id string) {
		want := strings.NewReplacer("{name}", name, "{id}", id).Replace(tpl)
		if got := expandTable(tpl, name, id); got != want {
			t.Errorf("expandTable(%q, %q, %q) = %q, want %q", tpl, name, id, got, want)
		}
	})
}
