// Package statuspage serves the operator's status page: every table's
// verdict, lag (a number and a bar), last move, what holds it back and a
// timeline of its lag; and every tracked run with its state. The page is
// plain HTML rendered on the server, so it reads without a script; a small
// embedded script keeps it live from a server-sent event stream that the
// control table's NOTIFY feeds. Nothing is fetched from outside.
//
// Routes (Handler): GET / (the page), GET /status/events (the stream),
// GET /status/assets/ (the stylesheet and the script).
package statuspage
