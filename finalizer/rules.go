package finalizer

import (
	"fmt"
	"path"
	"strings"

	"github.com/finalizer-dev/finalizer/progress"
)

// Rule tracks every run of the queries it matches (declarative tracking,
// the config file's `tables:` list).
type Rule struct {
	// Table is the tracked table's name; "{name}" and "{id}" are replaced
	// with the query's name and id.
	Table string
	// Query matches the query's name or its id; it may be a glob
	// (path.Match syntax: *, ?, [a-z]).
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
	if _, err := path.Match(r.Query, ""); err != nil {
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
	byID, _ := path.Match(r.Query, queryID)
	byName := false
	if name != "" {
		byName, _ = path.Match(r.Query, name)
	}
	if !byID && !byName {
		return "", false
	}
	if name == "" && strings.Contains(r.Table, "{name}") {
		return "", false
	}
	return strings.NewReplacer("{name}", name, "{id}", queryID).Replace(r.Table), true
}
