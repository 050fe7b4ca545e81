// Package control owns the PostgreSQL control table: its versioned
// migrations, the forward-only advance of a table's verdict, reads, and
// waiting for a verdict through LISTEN/NOTIFY. It is the only package that
// imports pgx; driver errors are translated at its edge into the errors
// declared in this package.
package control
