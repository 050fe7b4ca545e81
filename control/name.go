package control

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DefaultSchema is the schema of a control-table name given without one.
const DefaultSchema = "public"

// maxIdentLen is PostgreSQL's NAMEDATALEN-1: longer identifiers are
// silently truncated by the server, so they are refused here.
const maxIdentLen = 63

// Suffixes of the tables kept beside the control table.
const (
	schemaSuffix = "_schema" // applied migrations
	tracksSuffix = "_tracks" // persisted explicit tracks
	auditSuffix  = "_audit"  // operator actions: rewinds, acknowledgements
	feedsSuffix  = "_feeds"  // each table's feeders and their watermarks
	outboxSuffix = "_outbox" // moves of tables with actions, not yet expanded (issue 19)
	sendsSuffix  = "_sends"  // each action's events: pending, delivered, dead
	actsSuffix   = "_acts"   // the patterns of the tables that have actions
	annoSuffix   = "_anno"   // per table: the announcement generation and high water
	moveSuffix   = "_moved"  // the trigger function that fills the outbox
	rwposSuffix  = "_rwpos"  // the event stream's position recorded with each table's last rewind
)

var identPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)

// ParseTableName splits a control-table name "[schema.]name" into its
// schema (DefaultSchema when absent) and name. Each part must be a plain
// SQL identifier (a letter or underscore, then letters, digits, _ or $);
// quotes, dots beyond the one separator, spaces and semicolons are
// refused with ErrInvalidName. Both parts are folded to lower case, as
// PostgreSQL folds unquoted names, so "Ops.Verdicts" is the table a user
// reaches as ops.verdicts in psql. The name must leave room for the
// "_schema" and "_tracks" tables kept beside it (56 bytes at most).
func ParseTableName(s string) (schema, name string, err error) {
	parts := strings.Split(s, ".")
	switch len(parts) {
	case 1:
		schema, name = DefaultSchema, parts[0]
	case 2:
		schema, name = parts[0], parts[1]
	default:
		return "", "", fmt.Errorf("%w %q: want [schema.]name", ErrInvalidName, s)
	}
	for _, part := range []string{schema, name} {
		if !identPattern.MatchString(part) {
			return "", "", fmt.Errorf("%w %q: %q is not a plain identifier (letters, digits, _ and $, not starting with a digit)", ErrInvalidName, s, part)
		}
	}
	if len(schema) > maxIdentLen {
		return "", "", fmt.Errorf("%w %q: schema longer than %d bytes", ErrInvalidName, s, maxIdentLen)
	}
	if len(name)+len(schemaSuffix) > maxIdentLen {
		return "", "", fmt.Errorf("%w %q: name longer than %d bytes", ErrInvalidName, s, maxIdentLen-len(schemaSuffix))
	}
	return strings.ToLower(schema), strings.ToLower(name), nil
}

// names are the quoted, ready-to-use identifiers of one control table and
// the tables kept beside it.
type names struct {
	display string // schema.name, for messages
	table   string // "schema"."name"
	schema  string // "schema"."name_schema"
	tracks  string // "schema"."name_tracks"
	audit   string // "schema"."name_audit"
	feeds   string // "schema"."name_feeds"
	outbox  string // "schema"."name_outbox"
	sends   string // "schema"."name_sends"
	acts    string // "schema"."name_acts"
	anno    string // "schema"."name_anno"
	moved   string // "schema"."name_moved": a function
	rwpos   string // "schema"."name_rwpos"
	nspName string // schema, unquoted, for catalog lookups
	nsp     string // "schema"
	// notifyEnd ends every notification of a move after its time: the
	// control table's name, so that the stores of another control table
	// in the same database (the channel is shared) ignore it.
	notifyEnd string
}

func newNames(schema, name string) names {
	return names{
		display: schema + "." + name,
		table:   pgx.Identifier{schema, name}.Sanitize(),
		schema:  pgx.Identifier{schema, name + schemaSuffix}.Sanitize(),
		tracks:  pgx.Identifier{schema, name + tracksSuffix}.Sanitize(),
		audit:   pgx.Identifier{schema, name + auditSuffix}.Sanitize(),
		feeds:   pgx.Identifier{schema, name + feedsSuffix}.Sanitize(),
		outbox:  pgx.Identifier{schema, name + outboxSuffix}.Sanitize(),
		sends:   pgx.Identifier{schema, name + sendsSuffix}.Sanitize(),
		acts:    pgx.Identifier{schema, name + actsSuffix}.Sanitize(),
		anno:    pgx.Identifier{schema, name + annoSuffix}.Sanitize(),
		moved:   pgx.Identifier{schema, name + moveSuffix}.Sanitize(),
		rwpos:   pgx.Identifier{schema, name + rwposSuffix}.Sanitize(),
		nspName: schema,
		nsp:     pgx.Identifier{schema}.Sanitize(),

		notifyEnd: notifyEnd(schema + "." + name),
	}
}

// notifyEnd is what follows the time in a move's notification: the
// control table's name and the closing brace. Schema and name are at most
// maxIdentLen bytes each, so with MaxTableNameLen the payload stays well
// inside maxNotifyPayload.
func notifyEnd(display string) string {
	b, _ := json.Marshal(display) // a string always marshals
	return `","control_table":` + string(b) + `}`
}

// sqlLiteral quotes s as an SQL string literal (standard_conforming_strings,
// PostgreSQL's default since 9.1).
func sqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
