package eventlog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.uber.org/zap"
)

// Defaults for Options.
const (
	// DefaultPoll is how often a following Reader looks for more of a log
	// that has nothing new to read.
	DefaultPoll = 500 * time.Millisecond
	// DefaultMaxLine is the longest line a Reader returns, in bytes. A
	// progress event with many sources or state operators can be tens of
	// KiB; this leaves room for pathological ones.
	DefaultMaxLine = 16 << 20
)

// Stdin is the path that makes Open read standard input (or Options.Stdin).
const Stdin = "-"

// Rolling event log names (RollingEventLogFilesWriter).
const (
	rollingDirPrefix = "eventlog_v2_"
	eventsFilePrefix = "events_"
	appStatusPrefix  = "appstatus_"
	readBufferSize   = 64 << 10
)

// Errors of Open and Next.
var (
	// ErrUnsupportedCodec is returned (wrapped, with the file and the codec
	// named) for a log compressed with a codec other than zstd.
	ErrUnsupportedCodec = errors.New("unsupported compression codec")
	// ErrNoEventLog is returned by Open for a directory that holds no
	// rolling event log (or more than one).
	ErrNoEventLog = errors.New("no spark event log")
	// ErrLineTooLong is returned (wrapped, with the file and line number) by
	// Next for a line longer than Options.MaxLine. The line is skipped and
	// the Reader stays usable: the next call returns the following line.
	ErrLineTooLong = errors.New("line too long")
	// ErrClosed is returned by Next after Close.
	ErrClosed = errors.New("event log reader closed")
)

// Options configure Open. The zero value reads a log once, to its end.
type Options struct {
	// Follow makes Next wait for more lines at the end of the log instead of
	// returning io.EOF, until its context is done. An `.inprogress` file
	// ends (io.EOF) once Spark renamed it to its final name and its last
	// line was read; a rolling directory ends once its appstatus file lost
	// the `.inprogress` suffix and its last events file was read. A file
	// with a final name is followed until the context is done. Standard
	// input is read to its end either way.
	Follow bool
	// Poll is how often a following Reader looks for more; 0 means
	// DefaultPoll.
	Poll time.Duration
	// MaxLine is the longest line returned; 0 means DefaultMaxLine.
	MaxLine int
	// Logger receives debug and warning logs; nil discards them.
	Logger *zap.Logger
	// Stdin is what the path "-" reads; nil means os.Stdin. When it is not
	// os.Stdin and implements io.Closer, Close closes it.
	Stdin io.Reader
}

// Line is one line of an event log, without its line ending.
type Line struct {
	// Data is the line's bytes; the caller owns them.
	Data []byte
	// Source is the file the line came from ("-" for standard input).
	Source string
	// Number is the line's 1-based number within Source (after
	// decompression).
	Number int
}

// mode is what Open found at the path.
type mode int

const (
	modeFile mode = iota
	modeRolling
	modeStdin
)

// Reader reads the lines of one Spark event log in order. Its methods must
// not be called concurrently.
type Reader struct {
	o    Options
	log  *zap.Logger
	mode mode
	path string // the file, or the rolling directory

	cur  *segment        // the file being read; nil between files
	last int64           // rolling: index of the last file opened; -1 before the first
	ctx  context.Context // Next's context while it runs
	err  error           // sticky: io.EOF or a read error

	// Standard input is read by a pump goroutine so that Next can return
	// when its context is done while a read blocks.
	pump     chan result
	stop     chan struct{}
	pumpDone chan struct{}
	closer   io.Closer
	once     sync.Once
}

// result is one answer of the stdin pump.
type result struct {
	line Line
	err  error
}

// Open opens the Spark event log at path for reading:
//
//   - "-": standard input (Options.Stdin);
//   - a file: a single-file event log, finished or `.inprogress` (when the
//     named file is missing, its `.inprogress` twin or its final name is
//     opened instead, so a log can be named before or after Spark renames
//     it);
//   - a rolling event log directory `eventlog_v2_<appId>`: its
//     `events_<N>_<appId>[.<codec>]` files in the order of N (a `.compact`
//     file replaces the files up to its N; appstatus files are not read);
//   - a directory holding exactly one `eventlog_v2_*` directory: that one.
//
// The codec comes from the file name's extension (none, `.zstd`, `.zst`);
// a file without one is recognised by its first bytes. Any other Spark
// codec (`.lz4`, `.lzf`, `.snappy`) is refused with an error wrapping
// ErrUnsupportedCodec. Open returns ErrNoEventLog (wrapped) for a directory
// that holds no rolling event log, and without Follow for a rolling
// directory with no events file yet.
func Open(path string, o Options) (*Reader, error) {
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	r := &Reader{o: o, log: o.Logger, path: path, last: -1, stop: make(chan struct{})}
	if path == Stdin {
		r.openStdin()
		return r, nil
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		// The log may have been renamed between the user typing its
		// name and now, in either direction.
		alt := path + inProgressSuffix
		if strings.HasSuffix(path, inProgressSuffix) {
			alt = strings.TrimSuffix(path, inProgressSuffix)
		}
		if afi, aerr := os.Stat(alt); aerr == nil {
			r.log.Debug("event log renamed, opening the other name",
				zap.String("file", path), zap.String("opened", alt))
			path, fi, err = alt, afi, nil
			r.path = path
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open event log: %w", err)
	}
	if !fi.IsDir() {
		r.mode = modeFile
		if _, err := codecFromName(path); err != nil {
			return nil, fmt.Errorf("open event log %w", err)
		}
		s, err := r.openSegment(path, -1)
		if err != nil {
			return nil, err
		}
		r.cur = s
		return r, nil
	}
	dir, err := rollingDir(path)
	if err != nil {
		return nil, err
	}
	r.mode, r.path = modeRolling, dir
	files, _, err := listRolling(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if _, err := codecFromName(f.name); err != nil {
			return nil, fmt.Errorf("open event log %w", err)
		}
	}
	if len(files) == 0 && !o.Follow {
		return nil, fmt.Errorf("open event log %s: %w: no %s* files in the directory",
			dir, ErrNoEventLog, eventsFilePrefix)
	}
	return r, nil
}

// rollingDir returns the rolling event log directory at path: path itself
// when it holds events files, or its only `eventlog_v2_*` subdirectory.
func rollingDir(path string) (string, error) {
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", fmt.Errorf("open event log: %w", err)
	}
	var subdirs []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() && (strings.HasPrefix(name, eventsFilePrefix) || strings.HasPrefix(name, appStatusPrefix)) {
			return path, nil
		}
		if e.IsDir() && strings.HasPrefix(name, rollingDirPrefix) {
			subdirs = append(subdirs, name)
		}
	}
	if strings.HasPrefix(filepath.Base(filepath.Clean(path)), rollingDirPrefix) {
		return path, nil // a rolling directory Spark has not written to yet
	}
	switch len(subdirs) {
	case 1:
		return filepath.Join(path, subdirs[0]), nil
	case 0:
		return "", fmt.Errorf("open event log %s: %w: expected a file, a %s<appId> directory, or a directory holding one",
			path, ErrNoEventLog, rollingDirPrefix)
	default:
		return "", fmt.Errorf("open event log %s: %w: %d rolling event logs (%s, ...); name one",
			path, ErrNoEventLog, len(subdirs), subdirs[0])
	}
}

// rollFile is one events file of a rolling event log directory.
type rollFile struct {
	name    string // full path
	index   int64
	compact bool
}

// listRolling lists the events files of a rolling directory in the order
// to read them, and reports whether the application has completed (its
// appstatus file has no `.inprogress` suffix). A `.compact` file with index
// C stands for every file up to C, so those are left out.
func listRolling(dir string) ([]rollFile, bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, false, fmt.Errorf("list rolling event log: %w", err)
	}
	var files []rollFile
	completed := false
	maxCompact := int64(-1)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		if strings.HasPrefix(name, appStatusPrefix) {
			if !strings.HasSuffix(name, inProgressSuffix) {
				completed = true
			}
			continue
		}
		if !strings.HasPrefix(name, eventsFilePrefix) {
			continue
		}
		digits, _, ok := strings.Cut(strings.TrimPrefix(name, eventsFilePrefix), "_")
		if !ok {
			continue
		}
		index, err := strconv.ParseInt(digits, 10, 64)
		if err != nil {
			continue
		}
		f := rollFile{name: filepath.Join(dir, name), index: index, compact: strings.HasSuffix(name, compactedSuffix)}
		if f.compact && index > maxCompact {
			maxCompact = index
		}
		files = append(files, f)
	}
	kept := files[:0]
	for _, f := range files {
		if f.index < maxCompact || (f.index == maxCompact && !f.compact) {
			continue
		}
		kept = append(kept, f)
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].index < kept[j].index })
	return kept, completed, nil
}

// Next returns the next line of the log. Blank lines are skipped. At the
// end of the log it returns io.EOF; with Options.Follow it first waits for
// more (see Options.Follow). A last line without its newline is returned
// only once the file is finished: while Spark may still be writing it
// (a live `.inprogress` file, the last file of a live rolling directory)
// it is held back. Next returns ctx.Err() when ctx is done while it waits
// or reads.
//
// An error wrapping ErrLineTooLong skips one line and the Reader stays
// usable; after any other error (io.EOF, ctx.Err(), a read or
// decompression error) the Reader is finished and Next returns that error
// again.
func (r *Reader) Next(ctx context.Context) (Line, error) {
	select {
	case <-r.stop:
		return Line{}, ErrClosed
	default:
	}
	if r.err != nil {
		return Line{}, r.err
	}
	if err := ctx.Err(); err != nil {
		return Line{}, err
	}
	if r.mode == modeStdin {
		return r.nextStdin(ctx)
	}
	r.ctx = ctx
	defer func() { r.ctx = nil }()
	for {
		if r.cur == nil {
			s, err := r.nextSegment()
			if err != nil {
				r.err = err
				return Line{}, err
			}
			r.cur = s
		}
		data, err := r.cur.readLine(r.o.MaxLine, r.finished)
		switch {
		case err == nil:
			return Line{Data: data, Source: r.cur.name, Number: r.cur.number}, nil
		case errors.Is(err, ErrLineTooLong):
			return Line{Source: r.cur.name, Number: r.cur.number}, err
		case errors.Is(err, io.EOF):
			r.cur.close()
			if r.mode == modeFile {
				r.err = io.EOF
				return Line{}, io.EOF
			}
			r.cur = nil
		default:
			r.err = err
			return Line{}, err
		}
	}
}

// nextSegment opens the rolling directory's next events file, waiting for
// it when following. It returns io.EOF when there is none and none will
// come.
func (r *Reader) nextSegment() (*segment, error) {
	for {
		files, completed, err := listRolling(r.path)
		if err != nil {
			return nil, err
		}
		i := sort.Search(len(files), func(i int) bool { return files[i].index > r.last })
		if i < len(files) {
			s, err := r.openSegment(files[i].name, files[i].index)
			if errors.Is(err, os.ErrNotExist) {
				continue // removed by compaction since the listing: list again
			}
			if err != nil {
				return nil, err
			}
			r.last = files[i].index
			return s, nil
		}
		if !r.o.Follow || completed {
			return nil, io.EOF
		}
		if err := r.wait(); err != nil {
			return nil, err
		}
	}
}

// finished reports whether nothing more will be appended to s: always
// without Follow for a file with a final name; for an `.inprogress` file
// once it is gone (renamed); for a rolling directory's file once a later
// file exists or the application completed.
func (r *Reader) finished(s *segment) (bool, error) {
	switch r.mode {
	case modeFile:
		if !strings.HasSuffix(s.name, inProgressSuffix) {
			return !r.o.Follow, nil
		}
		_, err := os.Stat(s.name)
		if errors.Is(err, os.ErrNotExist) {
			final := strings.TrimSuffix(s.name, inProgressSuffix)
			if _, ferr := os.Stat(final); ferr == nil {
				r.log.Debug("event log renamed to its final name", zap.String("file", s.name), zap.String("final", final))
			} else {
				r.log.Warn("event log removed while being read", zap.String("file", s.name))
			}
			return true, nil
		}
		return false, err
	case modeRolling:
		files, completed, err := listRolling(r.path)
		if err != nil {
			return false, err
		}
		if completed {
			return true, nil
		}
		return len(files) > 0 && files[len(files)-1].index > s.index, nil
	}
	return true, nil
}

// wait waits one poll interval, or until Next's context is done or the
// Reader is closed.
func (r *Reader) wait() error {
	t := time.NewTimer(r.o.Poll)
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return r.ctx.Err()
	case <-r.stop:
		return ErrClosed
	case <-t.C:
		return nil
	}
}

// openSegment opens one file of the log.
func (r *Reader) openSegment(name string, index int64) (*segment, error) {
	c, err := codecFromName(name)
	if err != nil {
		return nil, fmt.Errorf("read event log %w", err)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read event log: %w", err)
	}
	s := &segment{name: name, index: index, codec: c, f: f, log: r.log}
	s.raw = bufio.NewReaderSize(&tail{r: r, s: s}, readBufferSize)
	r.log.Debug("reading event log file", zap.String("file", name))
	return s, nil
}

// openStdin sets r up to read standard input through a pump goroutine.
func (r *Reader) openStdin() {
	r.mode = modeStdin
	in := r.o.Stdin
	if in == nil {
		in = os.Stdin
	}
	if c, ok := in.(io.Closer); ok && in != io.Reader(os.Stdin) {
		r.closer = c
	}
	s := &segment{name: Stdin, index: -1, log: r.log}
	s.raw = bufio.NewReaderSize(in, readBufferSize)
	r.pump = make(chan result)
	r.pumpDone = make(chan struct{})
	go func() {
		defer close(r.pumpDone)
		defer s.close()
		finished := func(*segment) (bool, error) { return true, nil }
		for {
			data, err := s.readLine(r.o.MaxLine, finished)
			res := result{line: Line{Data: data, Source: Stdin, Number: s.number}, err: err}
			if err != nil && !errors.Is(err, ErrLineTooLong) {
				res.line = Line{}
			}
			select {
			case r.pump <- res:
			case <-r.stop:
				return
			}
			if res.err != nil && !errors.Is(res.err, ErrLineTooLong) {
				return
			}
		}
	}()
}

// nextStdin returns the pump's next line.
func (r *Reader) nextStdin(ctx context.Context) (Line, error) {
	select {
	case res := <-r.pump:
		if res.err != nil && !errors.Is(res.err, ErrLineTooLong) {
			r.err = res.err
		}
		return res.line, res.err
	case <-ctx.Done():
		return Line{}, ctx.Err()
	case <-r.stop:
		return Line{}, ErrClosed
	}
}

// Close releases the open file. It is safe to call more than once and
// returns nil. For standard input it stops the goroutine that reads it: an
// injected Options.Stdin that is an io.Closer is closed and Close waits for
// that goroutine; a read blocked on the process's real standard input
// cannot be interrupted, so Close does not wait for it (it ends with the
// read, at the latest when the process exits).
func (r *Reader) Close() error {
	r.once.Do(func() {
		close(r.stop)
		if r.mode == modeStdin {
			if r.closer != nil {
				_ = r.closer.Close()
				<-r.pumpDone
			}
			return
		}
		if r.cur != nil {
			r.cur.close()
			r.cur = nil
		}
	})
	return nil
}

// segment is one file (or standard input) being read.
type segment struct {
	name   string
	index  int64 // rolling index; -1 otherwise
	codec  codec
	f      *os.File      // nil for standard input
	raw    *bufio.Reader // the bytes as stored
	dec    *zstd.Decoder // set once the content is known to be zstd
	lines  *bufio.Reader // the decoded bytes; nil until the first read
	number int           // lines returned or skipped so far
	log    *zap.Logger
}

// tail reads a file that may still grow. At the end of the file it returns
// io.EOF at once without Follow; with Follow it waits (polling) until more
// bytes arrive or the file is finished, and then reads it to its end.
type tail struct {
	r         *Reader
	s         *segment
	finishing bool
}

func (t *tail) Read(p []byte) (int, error) {
	for {
		n, err := t.s.f.Read(p)
		if n > 0 {
			return n, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if !t.r.o.Follow || t.finishing {
			return 0, io.EOF
		}
		done, err := t.r.finished(t.s)
		if err != nil {
			return 0, err
		}
		if done {
			// Read once more: bytes written before the rename or the
			// next file are still to come.
			t.finishing = true
			continue
		}
		if err := t.r.wait(); err != nil {
			return 0, err
		}
	}
}

// start decides how the segment's bytes are decoded, on the first read.
func (s *segment) start() error {
	c := s.codec
	if c == codecSniff {
		var err error
		c, err = sniff(s.name, s.raw)
		if err != nil {
			return err // io.EOF for an empty, finished file
		}
	}
	if c == codecZstd {
		d, err := newZstd(s.raw)
		if err != nil {
			return fmt.Errorf("read event log %s: %w", s.name, err)
		}
		s.dec = d
		s.lines = bufio.NewReaderSize(d, readBufferSize)
		return nil
	}
	s.lines = s.raw
	return nil
}

// readLine returns the next non-blank line of the segment without its line
// ending. At the end of the segment a last line without a newline is
// returned when finished reports the file finished, else dropped; then
// io.EOF. A line longer than max is skipped with ErrLineTooLong.
func (s *segment) readLine(max int, finished func(*segment) (bool, error)) ([]byte, error) {
	if s.lines == nil {
		if err := s.start(); err != nil {
			return nil, err
		}
	}
	for {
		var buf []byte
		tooLong := false
		for {
			chunk, err := s.lines.ReadSlice('\n')
			if !tooLong {
				if len(buf)+len(chunk) > max+2 { // room for "\r\n"
					tooLong, buf = true, nil
				} else {
					buf = append(buf, chunk...)
				}
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if s.dec != nil && errors.Is(err, io.ErrUnexpectedEOF) {
				// A zstd frame cut short: the end of a file Spark is
				// still writing, or a truncated file.
				if done, ferr := finished(s); ferr == nil && !done {
					err = io.EOF
				} else {
					return nil, fmt.Errorf("read event log %s: truncated zstd stream after line %d: %w", s.name, s.number, err)
				}
			}
			if errors.Is(err, io.EOF) {
				if len(buf) == 0 && !tooLong {
					return nil, io.EOF
				}
				done, ferr := finished(s)
				if ferr != nil {
					return nil, ferr
				}
				if !done {
					s.log.Debug("holding back the partial last line of a log still being written",
						zap.String("file", s.name), zap.Int("line", s.number+1))
					return nil, io.EOF
				}
				err = nil // a finished file's last line without a newline
			}
			if err != nil {
				return nil, fmt.Errorf("read event log %s: %w", s.name, err)
			}
			break
		}
		s.number++
		if tooLong {
			return nil, fmt.Errorf("read event log %s:%d: %w (longer than %d bytes)", s.name, s.number, ErrLineTooLong, max)
		}
		line := trimEOL(buf)
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return line, nil
	}
}

// trimEOL removes a trailing "\n" or "\r\n".
func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

// close releases the segment's decoder and file.
func (s *segment) close() {
	if s.dec != nil {
		s.dec.Close()
		s.dec = nil
	}
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
}
