// Package statuspage serves the operator's status page: every table's
// verdict, lag (a number and a bar), last move, what holds it back and a
// timeline of its lag; and every tracked run with its state. The page is
// plain HTML rendered on the server, so it reads without a script; a small
// embedded script keeps it live from a server-sent event stream that the
// control table's NOTIFY feeds. Nothing is fetched from outside.
//
// The page works only while someone looks: with no stream open it records
// announced moves in the timeline and reads nothing; a request builds the
// model afresh (at most every RunsEvery); an open stream keeps it live,
// spending at most about a tenth of a core (ADR 0013, addendum).
//
// Routes (Handler): GET / (the page), GET /status/events (the stream),
// GET /status/assets/ (the stylesheet and the script).
package statuspage
