package finalizer

import (
	"fmt"
	"strings"
	"sync"

	"github.com/gobwas/glob"

	"github.com/finalizer-dev/finalizer/progress"
)

// Rule tracks every run of the queries it matches (declarative tracking,
// the config file's `tables:` list).
type Rule struct {
	// Table is the tracked table's name; "{name}" and "{id}" are replaced
	// with the query's name and id.
	Table string
	// Query matches the query's name or its id; it may be a glob (see
	// MatchQuery: `*` matches any characters, `/` and `.` included).
	Query string
	// Spec says how a progress becomes a candidate.
	Spec progress.Spec
	// Feeders are the queries (names or ids) expected to write Table
	// (ADR 0015): one that has not reported yet holds the table. Only for
	// a table without {name} or {id}.
	Feeders []string
	// Retire is what ends a matched query's place among the table's
	// feeders: RetireNever (the default: only an operator retires it) or
	// RetireOnCleanTermination.
	Retire string
}

// The lifecycles of a rule's feeders (Rule.Retire).
const (
	// RetireNever leaves a query a feeder of its table until an operator
	// retires it (finalizer feeders retire).
	RetireNever = "never"
	// RetireOnCleanTermination retires a query from its table when one of
	// its runs terminates without an exception, after its last progress
	// was applied: for queries that end for good (availableNow backfills).
	// A run that fails is never retired.
	RetireOnCleanTermination = "on_clean_termination"
)

// Validate reports a rule that can never work: an empty table or query, a
// bad glob, or an unknown placeholder in the table template.
func (r Rule) Validate() error {
	if r.Table == "" {
		return fmt.Errorf("table is empty")
	}
	if r.Query == "" {
		return fmt.Errorf("table %q: query is empty", r.Table)
	}
	if _, err := compileQuery(r.Query); err != nil {
		return fmt.Errorf("table %q: query %q is not a valid glob: %w", r.Table, r.Query, err)
	}
	rest := strings.NewReplacer("{name}", "", "{id}", "").Replace(r.Table)
	if strings.ContainsAny(rest, "{}") {
		return fmt.Errorf("table %q: only {name} and {id} may stand in braces", r.Table)
	}
	if len(r.Feeders) > 0 && rest != r.Table {
		return fmt.Errorf("table %q: feeders need one table, not a template with {name} or {id}", r.Table)
	}
	for _, f := range r.Feeders {
		if strings.TrimSpace(f) == "" {
			return fmt.Errorf("table %q: an empty name in feeders", r.Table)
		}
	}
	switch r.Retire {
	case "", RetireNever, RetireOnCleanTermination:
	default:
		return fmt.Errorf("table %q: retire %q: want %s or %s", r.Table, r.Retire, RetireNever, RetireOnCleanTermination)
	}
	return nil
}

// Match reports whether the rule tracks a run of the query with this id and
// name ("" when the query has none), and the table it tracks. A template
// that needs {name} does not match a query without a name.
func (r Rule) Match(queryID, name string) (string, bool) {
	byID := MatchQuery(r.Query, queryID)
	byName := name != "" && MatchQuery(r.Query, name)
	if !byID && !byName {
		return "", false
	}
	if name == "" && strings.Contains(r.Table, "{name}") {
		return "", false
	}
	return expandTable(r.Table, name, queryID), true
}

// expandTable writes template with every {name} replaced by name and every
// {id} by id, in one pass from the left (what is put in is not read
// again), as strings.NewReplacer("{name}", name, "{id}", id).Replace did;
// without building a replacer per call, which a restart of 100,000 runs
// did 100,000 times (issue 12, sixth pass). A template without a
// placeholder is returned as it is.
func expandTable(template, name, id string) string {
	i := strings.IndexByte(template, '{')
	if i < 0 {
		return template
	}
	var b strings.Builder
	b.Grow(len(template) + len(name) + len(id))
	for {
		b.WriteString(template[:i])
		rest := template[i:]
		switch {
		case strings.HasPrefix(rest, "{name}"):
			b.WriteString(name)
			template = rest[len("{name}"):]
		case strings.HasPrefix(rest, "{id}"):
			b.WriteString(id)
			template = rest[len("{id}"):]
		default:
			b.WriteByte('{')
			template = rest[1:]
		}
		if i = strings.IndexByte(template, '{'); i < 0 {
			b.WriteString(template)
			return b.String()
		}
	}
}

// MatchQuery reports whether pattern, a rule's query, matches s, a query's
// name or id. A query name is not a path: `*` matches any characters,
// `/` and `.` included (`ingest*` matches `ingest/orders`); `?` matches
// one character; `[abc]`, `[a-z]` one of a set and `[!a-z]` (or `[^a-z]`)
// one character outside it; `{a,b}` either alternative; `\` takes the
// next character literally. Matching is case-sensitive, as Spark's names
// are. A pattern that does not compile matches nothing (Rule.Validate
// refuses it).
func MatchQuery(pattern, s string) bool {
	g, err := compileQuery(pattern)
	return err == nil && g.Match(s)
}

// queryGlobs caches compiled query patterns: a rule's pattern is matched
// against every new run.
var queryGlobs sync.Map // pattern -> *glob.Pattern

// compileQuery compiles a query pattern with no separator, so that `*`
// crosses `/` and `.`; `[^` is read as `[!` (path.Match's negation, which
// earlier versions took).
func compileQuery(pattern string) (*glob.Pattern, error) {
	if g, ok := queryGlobs.Load(pattern); ok {
		return g.(*glob.Pattern), nil
	}
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		b.WriteByte(c)
		switch {
		case c == '\\' && i+1 < len(pattern):
			i++
			b.WriteByte(pattern[i])
		case c == '[' && i+1 < len(pattern) && pattern[i+1] == '^':
			b.WriteByte('!')
			i++
		}
	}
	g, err := glob.Compile(b.String())
	if err != nil {
		return nil, err
	}
	queryGlobs.Store(pattern, g)
	return g, nil
}

// nearMiss returns the first rule whose query would match name but for
// case or the separator used (`-`, `_`, `.`, `/` and a space are taken as
// one): a name close to a pattern, most likely meant to be tracked, that
// an operator should hear of rather than find untracked.
func nearMiss(rules []Rule, name string) (Rule, bool) {
	if name == "" {
		return Rule{}, false
	}
	folded := foldName(name)
	for _, r := range rules {
		if MatchQuery(foldName(r.Query), folded) {
			return r, true
		}
	}
	return Rule{}, false
}

// foldName lowercases s and writes every separator as `_`.
var foldName = func() func(string) string {
	sep := strings.NewReplacer("-", "_", ".", "_", "/", "_", " ", "_")
	return func(s string) string { return sep.Replace(strings.ToLower(s)) }
}()
