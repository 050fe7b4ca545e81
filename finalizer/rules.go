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
}

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
