package eventlog

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrUnfinishedDocument is returned (wrapped, with where the document
// began) for a pretty-printed JSON document that never closed: the input
// ended, or a new event-log line began, inside it.
var ErrUnfinishedDocument = errors.New("unfinished JSON document")

// driverProgressMarker is how Spark's driver log introduces a progress:
// ProgressReporter logs "Streaming query made progress: " followed by the
// progress's pretty-printed JSON (StreamingQueryProgress.toString is its
// prettyJson), which spans many lines.
var driverProgressMarker = []byte("Streaming query made progress: ")

// Documents turns the lines of an input into JSON documents. One-line
// documents (the event-log form, JSON lines) pass through unchanged. A
// pretty-printed document (what println(query.lastProgress) or prettyJson
// print, one member per line) is joined from the line that opens it to the
// line that closes it. A line of Spark's driver log that says "Streaming
// query made progress: {" starts such a document at its brace. Other lines
// pass through, for the caller to skip or call malformed.
//
// The zero value is ready to use; MaxBytes 0 means DefaultMaxLine.
type Documents struct {
	// MaxBytes bounds a joined document; a longer one is dropped with an
	// error wrapping ErrLineTooLong.
	MaxBytes int

	buf   bytes.Buffer
	start Line // the first line of the document being joined
	scan  braceScanner
}

// Add takes the next line. It returns a complete document (ok), nothing
// yet (a multi-line document is still open), or an error for a document
// that had to be dropped; the line that caused the drop is not lost: it is
// returned as doc when it is complete by itself.
func (d *Documents) Add(l Line) (doc Line, ok bool, err error) {
	if d.buf.Len() > 0 {
		// A complete one-line document inside an open one (an event-log
		// line, a JSON line) means the open one was cut short: report it,
		// and start over with this line.
		if startsOwnDocument(l.Data) {
			err = d.unfinished()
			doc, ok, _ = d.begin(l)
			return doc, ok, err
		}
		d.buf.WriteByte('\n')
		d.buf.Write(l.Data)
		if d.buf.Len() > d.max() {
			start := d.start
			d.reset()
			return Line{}, false, fmt.Errorf("%s:%d: %w: a document longer than %d bytes", start.Source, start.Number, ErrLineTooLong, d.max())
		}
		if !d.scan.feed(l.Data) {
			return Line{}, false, nil
		}
		doc = Line{Data: bytes.Clone(d.buf.Bytes()), Source: d.start.Source, Number: d.start.Number}
		d.reset()
		return doc, true, nil
	}
	return d.begin(l)
}

// begin looks at a line outside any document.
func (d *Documents) begin(l Line) (Line, bool, error) {
	t := bytes.TrimSpace(l.Data)
	from := -1
	switch {
	case len(t) == 0:
		return l, true, nil
	case t[0] == '{':
		if t[len(t)-1] == '}' {
			return l, true, nil // one line: the common case, not scanned
		}
		from = bytes.IndexByte(l.Data, '{')
	default:
		if i := bytes.Index(l.Data, driverProgressMarker); i >= 0 {
			from = i + len(driverProgressMarker)
			if from >= len(l.Data) || l.Data[from] != '{' {
				from = -1
			}
		}
	}
	if from < 0 {
		return l, true, nil
	}
	d.scan = braceScanner{}
	if d.scan.feed(l.Data[from:]) {
		// A document complete on this line (a one-line driver log line).
		return Line{Data: bytes.Clone(l.Data[from:]), Source: l.Source, Number: l.Number}, true, nil
	}
	d.start = l
	d.buf.Write(l.Data[from:])
	return Line{}, false, nil
}

// Flush reports a document still open at the end of the input.
func (d *Documents) Flush() error {
	if d.buf.Len() == 0 {
		return nil
	}
	return d.unfinished()
}

func (d *Documents) unfinished() error {
	start := d.start
	d.reset()
	return fmt.Errorf("%s:%d: %w", start.Source, start.Number, ErrUnfinishedDocument)
}

func (d *Documents) reset() {
	d.buf.Reset()
	d.start = Line{}
	d.scan = braceScanner{}
}

func (d *Documents) max() int {
	if d.MaxBytes > 0 {
		return d.MaxBytes
	}
	return DefaultMaxLine
}

// startsOwnDocument reports whether a line is a one-line JSON object of
// its own: `{"` ... `}` with its braces balanced on the line. Lines of a
// pretty-printed document hold one member each, never a whole object that
// begins with a key.
func startsOwnDocument(line []byte) bool {
	t := bytes.TrimSpace(line)
	if !bytes.HasPrefix(t, []byte(`{"`)) || t[len(t)-1] != '}' {
		return false
	}
	var s braceScanner
	for i, c := range t {
		if s.feed([]byte{c}) {
			return i == len(t)-1
		}
	}
	return false
}

// braceScanner follows the nesting of JSON objects and arrays across
// lines, skipping strings.
type braceScanner struct {
	depth   int
	started bool
	inStr   bool
	esc     bool
}

// feed scans b and reports whether the outermost value closed in it.
func (s *braceScanner) feed(b []byte) bool {
	for _, c := range b {
		switch {
		case s.inStr:
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.inStr = false
			}
		case c == '"':
			s.inStr = true
		case c == '{' || c == '[':
			s.depth++
			s.started = true
		case c == '}' || c == ']':
			s.depth--
			if s.started && s.depth == 0 {
				return true
			}
		}
	}
	return false
}
