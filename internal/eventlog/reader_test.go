package eventlog_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.uber.org/goleak"

	"github.com/finalizer-dev/finalizer/internal/eventlog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	sparkLog = "testdata/local-1596020211915.streaming.jsonl"
	appID    = "local-1596020211915"
	// testPoll keeps following tests fast; the deadlines below bound them.
	testPoll = 2 * time.Millisecond
	deadline = 10 * time.Second
)

// sparkLines returns the lines of the real Spark event log, without their
// newlines.
func sparkLines(t *testing.T) [][]byte {
	t.Helper()
	data, err := os.ReadFile(sparkLog)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	if len(lines) != 12 {
		t.Fatalf("%s: %d lines, want 12", sparkLog, len(lines))
	}
	return lines
}

// joinLines returns lines as file content, each ending with a newline.
func joinLines(lines [][]byte) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// zstdBytes compresses data in one zstd frame.
func zstdBytes(t testing.TB, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := zstd.NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, path string, o eventlog.Options) *eventlog.Reader {
	t.Helper()
	r, err := eventlog.Open(path, o)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// readAll reads r to io.EOF.
func readAll(t *testing.T, r *eventlog.Reader) []eventlog.Line {
	t.Helper()
	ctx := testContext(t)
	var out []eventlog.Line
	for {
		l, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next after %d lines: %v", len(out), err)
		}
		out = append(out, l)
	}
}

// next reads one line, failing the test on an error.
func next(t *testing.T, ctx context.Context, r *eventlog.Reader) eventlog.Line {
	t.Helper()
	l, err := r.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return l
}

func wantData(t *testing.T, got []eventlog.Line, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].Data, want[i]) {
			t.Errorf("line %d: got %.80q, want %.80q", i, got[i].Data, want[i])
		}
	}
}

func TestReadFile(t *testing.T) {
	lines := sparkLines(t)
	plain := joinLines(lines)
	compressed := zstdBytes(t, plain)

	cases := []struct {
		name string
		file string
		data []byte
	}{
		{"plain", appID, plain},
		{"plain with an extension", appID + ".jsonl", plain},
		{"finished inprogress name", appID + ".inprogress", plain},
		{"zstd", appID + ".zstd", compressed},
		{"zst", appID + ".zst", compressed},
		{"zstd inprogress", appID + ".zstd.inprogress", compressed},
		{"zstd recognised by content", appID, compressed},
		{"crlf and blank lines", appID, bytes.ReplaceAll(plain, []byte("\n"), []byte("\r\n\n"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), c.file)
			writeFile(t, path, c.data)
			got := readAll(t, open(t, path, eventlog.Options{}))
			wantData(t, got, lines)
			if got[0].Source != path {
				t.Errorf("Source = %q, want %q", got[0].Source, path)
			}
			if got[0].Number != 1 || got[11].Number < 12 {
				t.Errorf("Numbers = %d..%d, want 1..(>=12)", got[0].Number, got[11].Number)
			}
		})
	}
}

func TestReadLastLineWithoutNewline(t *testing.T) {
	lines := sparkLines(t)
	data := bytes.TrimSuffix(joinLines(lines), []byte("\n"))

	t.Run("finished file returns it", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), appID)
		writeFile(t, path, data)
		wantData(t, readAll(t, open(t, path, eventlog.Options{})), lines)
	})
	t.Run("inprogress file holds it back", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), appID+".inprogress")
		writeFile(t, path, data)
		wantData(t, readAll(t, open(t, path, eventlog.Options{})), lines[:11])
	})
}

func TestOpenRenamedLog(t *testing.T) {
	lines := sparkLines(t)
	dir := t.TempDir()
	final := filepath.Join(dir, appID)
	writeFile(t, final, joinLines(lines))
	// Named as it was while Spark wrote it; renamed since.
	wantData(t, readAll(t, open(t, final+".inprogress", eventlog.Options{})), lines)

	dir = t.TempDir()
	inprogress := filepath.Join(dir, appID+".inprogress")
	writeFile(t, inprogress, joinLines(lines))
	wantData(t, readAll(t, open(t, filepath.Join(dir, appID), eventlog.Options{})), lines)
}

// rollingDir writes lines into a rolling event log directory, split over
// files with the given indexes, created on disk in the reverse order.
func rollingDir(t *testing.T, parent string, lines [][]byte, indexes []int, ext string, compress bool) string {
	t.Helper()
	dir := filepath.Join(parent, "eventlog_v2_"+appID)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	per := (len(lines) + len(indexes) - 1) / len(indexes)
	for k := len(indexes) - 1; k >= 0; k-- {
		lo, hi := k*per, min((k+1)*per, len(lines))
		data := joinLines(lines[lo:hi])
		if compress {
			data = zstdBytes(t, data)
		}
		writeFile(t, filepath.Join(dir, "events_"+itoa(indexes[k])+"_"+appID+ext), data)
	}
	writeFile(t, filepath.Join(dir, "appstatus_"+appID), nil)
	return dir
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestReadRollingDir(t *testing.T) {
	lines := sparkLines(t)
	cases := []struct {
		name     string
		indexes  []int
		ext      string
		compress bool
	}{
		{"plain, numeric order", []int{1, 2, 10}, "", false},
		{"zstd", []int{1, 2, 3}, ".zstd", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := rollingDir(t, parent, lines, c.indexes, c.ext, c.compress)
			got := readAll(t, open(t, dir, eventlog.Options{}))
			wantData(t, got, lines)
			if want := filepath.Join(dir, "events_"+itoa(c.indexes[0])+"_"+appID+c.ext); got[0].Source != want {
				t.Errorf("first Source = %q, want %q", got[0].Source, want)
			}
			if last := got[len(got)-1]; last.Number != 4 || !strings.Contains(last.Source, "events_"+itoa(c.indexes[2])+"_") {
				t.Errorf("last line = %s:%d, want line 4 of the third file", last.Source, last.Number)
			}
			// The parent directory holding exactly one rolling log opens it.
			wantData(t, readAll(t, open(t, parent, eventlog.Options{})), lines)
		})
	}
}

func TestReadRollingDirCompacted(t *testing.T) {
	lines := sparkLines(t)
	dir := rollingDir(t, t.TempDir(), lines[:8], []int{1, 2}, "", false)
	// The history server compacted files 1 and 2 into one (keeping, say,
	// lines 2..7) and a third file followed.
	writeFile(t, filepath.Join(dir, "events_2_"+appID+".compact"), joinLines(lines[2:8]))
	writeFile(t, filepath.Join(dir, "events_3_"+appID), joinLines(lines[8:]))
	wantData(t, readAll(t, open(t, dir, eventlog.Options{})), lines[2:])
}

func TestOpenErrors(t *testing.T) {
	lines := sparkLines(t)
	cases := []struct {
		name    string
		setup   func(t *testing.T, dir string) string
		want    error
		mention []string
	}{
		{"lz4 by extension", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, appID+".lz4")
			writeFile(t, p, []byte("LZ4Block..."))
			return p
		}, eventlog.ErrUnsupportedCodec, []string{`"lz4"`, "spark.eventLog.compression.codec=zstd", "spark.eventLog.compress=false"}},
		{"snappy inprogress", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, appID+".snappy.inprogress")
			writeFile(t, p, nil)
			return p
		}, eventlog.ErrUnsupportedCodec, []string{`"snappy"`}},
		{"lzf in a rolling dir", func(t *testing.T, dir string) string {
			d := filepath.Join(dir, "eventlog_v2_"+appID)
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(d, "events_1_"+appID+".lzf"), []byte("ZV"))
			return d
		}, eventlog.ErrUnsupportedCodec, []string{`"lzf"`}},
		{"empty rolling dir", func(t *testing.T, dir string) string {
			d := filepath.Join(dir, "eventlog_v2_"+appID)
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			return d
		}, eventlog.ErrNoEventLog, []string{"events_"}},
		{"dir without a rolling log", func(t *testing.T, dir string) string {
			writeFile(t, filepath.Join(dir, appID), joinLines(lines))
			return dir
		}, eventlog.ErrNoEventLog, []string{"eventlog_v2_"}},
		{"dir with two rolling logs", func(t *testing.T, dir string) string {
			for _, n := range []string{"eventlog_v2_a", "eventlog_v2_b"} {
				if err := os.Mkdir(filepath.Join(dir, n), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			return dir
		}, eventlog.ErrNoEventLog, []string{"2 rolling event logs"}},
		{"missing file", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "nope")
		}, os.ErrNotExist, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := eventlog.Open(c.setup(t, t.TempDir()), eventlog.Options{})
			if err == nil {
				_ = r.Close()
				t.Fatal("Open succeeded, want an error")
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Open: %v, want %v", err, c.want)
			}
			for _, m := range c.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

func TestReadCodecRecognisedByContent(t *testing.T) {
	cases := []struct {
		name, codec string
		head        []byte
	}{
		{"lz4", "lz4", []byte("LZ4Block\x10\x00\x00")},
		{"snappy", "snappy", []byte("\x82SNAPPY\x00\x00\x00")},
		{"lzf", "lzf", []byte("ZV\x00\x00\x10")},
		{"gzip", "gzip", []byte("\x1f\x8b\x08\x00\x00\x00\x00\x00")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), appID)
			writeFile(t, path, c.head)
			r := open(t, path, eventlog.Options{})
			_, err := r.Next(testContext(t))
			if !errors.Is(err, eventlog.ErrUnsupportedCodec) || !strings.Contains(err.Error(), `"`+c.codec+`"`) {
				t.Fatalf("Next: %v, want ErrUnsupportedCodec naming %q", err, c.codec)
			}
		})
	}
}

func TestReadLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), appID)
	long := bytes.Repeat([]byte("x"), 300)
	writeFile(t, path, []byte("{\"a\":1}\n"+string(long)+"\n{\"b\":2}\n"))
	r := open(t, path, eventlog.Options{MaxLine: 100})
	ctx := testContext(t)
	if l := next(t, ctx, r); string(l.Data) != `{"a":1}` {
		t.Fatalf("line 1 = %q", l.Data)
	}
	l, err := r.Next(ctx)
	if !errors.Is(err, eventlog.ErrLineTooLong) || l.Number != 2 {
		t.Fatalf("line 2: %v (number %d), want ErrLineTooLong for line 2", err, l.Number)
	}
	if l := next(t, ctx, r); string(l.Data) != `{"b":2}` || l.Number != 3 {
		t.Fatalf("line 3 = %q (number %d)", l.Data, l.Number)
	}
	if _, err := r.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("Next at the end: %v, want io.EOF", err)
	}

	// The default allows progress lines of megabytes.
	path = filepath.Join(t.TempDir(), appID)
	big := append(append([]byte(`{"x":"`), bytes.Repeat([]byte("y"), 3<<20)...), '"', '}')
	writeFile(t, path, append(big, '\n'))
	got := readAll(t, open(t, path, eventlog.Options{}))
	if len(got) != 1 || !bytes.Equal(got[0].Data, big) {
		t.Fatalf("3 MiB line not returned intact (%d lines)", len(got))
	}
}

func TestFollowGrowingFile(t *testing.T) {
	lines := sparkLines(t)
	path := filepath.Join(t.TempDir(), appID)
	writeFile(t, path, joinLines(lines[:3]))
	r := open(t, path, eventlog.Options{Follow: true, Poll: testPoll})
	ctx := testContext(t)
	for i := range 3 {
		if l := next(t, ctx, r); !bytes.Equal(l.Data, lines[i]) {
			t.Fatalf("line %d = %.60q", i, l.Data)
		}
	}
	// At the end, Next waits; lines appended later arrive, the second one
	// written in two parts with the line break in the second.
	got := make(chan eventlog.Line, len(lines))
	errc := make(chan error, 1)
	go func() {
		for range len(lines) - 3 {
			l, err := r.Next(ctx)
			if err != nil {
				errc <- err
				return
			}
			got <- l
		}
		errc <- nil
	}()
	appendFile(t, path, joinLines(lines[3:4]))
	if l := <-got; !bytes.Equal(l.Data, lines[3]) || l.Number != 4 {
		t.Fatalf("appended line = %.60q (number %d)", l.Data, l.Number)
	}
	half := len(lines[4]) / 2
	appendFile(t, path, lines[4][:half])
	appendFile(t, path, append(append([]byte{}, lines[4][half:]...), '\n'))
	if l := <-got; !bytes.Equal(l.Data, lines[4]) {
		t.Fatalf("line written in two parts = %.60q", l.Data)
	}
	appendFile(t, path, joinLines(lines[5:]))
	if err := <-errc; err != nil {
		t.Fatalf("Next: %v", err)
	}
	for i := 5; i < len(lines); i++ {
		if l := <-got; !bytes.Equal(l.Data, lines[i]) {
			t.Fatalf("line %d = %.60q", i, l.Data)
		}
	}
}

func TestFollowHoldsBackPartialLine(t *testing.T) {
	lines := sparkLines(t)
	path := filepath.Join(t.TempDir(), appID+".inprogress")
	half := len(lines[3]) / 2
	writeFile(t, path, append(joinLines(lines[:3]), lines[3][:half]...))

	r := open(t, path, eventlog.Options{Follow: true, Poll: testPoll})
	ctx := testContext(t)
	for range 3 {
		next(t, ctx, r)
	}
	// The first reads buffered the partial line already; Next must not
	// return it while the rest is missing.
	short, cancel := context.WithTimeout(ctx, 50*testPoll)
	defer cancel()
	if l, err := r.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with a partial last line: %.60q, %v; want it held back", l.Data, err)
	}

	// A fresh reader on the same file: the partial line is consumed with
	// the complete ones and joined with its rest when that arrives.
	r2 := open(t, path, eventlog.Options{Follow: true, Poll: testPoll})
	for range 3 {
		next(t, ctx, r2)
	}
	got := make(chan eventlog.Line, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := r2.Next(ctx)
		got <- l
		errc <- err
	}()
	appendFile(t, path, append(append([]byte{}, lines[3][half:]...), '\n'))
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if l := <-got; !bytes.Equal(l.Data, lines[3]) || l.Number != 4 {
		t.Fatalf("completed line = %.60q (number %d)", l.Data, l.Number)
	}
}

func TestFollowInprogressRename(t *testing.T) {
	lines := sparkLines(t)
	for _, compress := range []bool{false, true} {
		name := "plain"
		if compress {
			name = "zstd"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			final := filepath.Join(dir, appID)
			if compress {
				final += ".zstd"
			}
			path := final + ".inprogress"
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// write appends lines the way Spark does: flushed after each
			// event, so a zstd frame grows block by block.
			var zw *zstd.Encoder
			if compress {
				zw, err = zstd.NewWriter(f)
				if err != nil {
					t.Fatal(err)
				}
			}
			write := func(ls [][]byte) {
				t.Helper()
				if zw == nil {
					if _, err := f.Write(joinLines(ls)); err != nil {
						t.Fatal(err)
					}
					return
				}
				if _, err := zw.Write(joinLines(ls)); err != nil {
					t.Fatal(err)
				}
				if err := zw.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			write(lines[:2])

			r := open(t, path, eventlog.Options{Follow: true, Poll: testPoll})
			ctx := testContext(t)
			var got []eventlog.Line
			got = append(got, next(t, ctx, r), next(t, ctx, r))
			done := make(chan error, 1)
			go func() {
				for {
					l, err := r.Next(ctx)
					if err != nil {
						done <- err
						return
					}
					got = append(got, l)
				}
			}()
			write(lines[2:6])
			write(lines[6:])
			if zw != nil {
				if err := zw.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path, final); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, io.EOF) {
				t.Fatalf("Next after the rename: %v, want io.EOF", err)
			}
			wantData(t, got, lines)
		})
	}
}

func TestFollowRollingDir(t *testing.T) {
	lines := sparkLines(t)
	dir := filepath.Join(t.TempDir(), "eventlog_v2_"+appID)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	status := filepath.Join(dir, "appstatus_"+appID+".inprogress")
	writeFile(t, status, nil)

	// Following starts before Spark wrote the first events file.
	r := open(t, dir, eventlog.Options{Follow: true, Poll: testPoll})
	ctx := testContext(t)
	got := make(chan eventlog.Line, len(lines))
	done := make(chan error, 1)
	go func() {
		for {
			l, err := r.Next(ctx)
			if err != nil {
				done <- err
				return
			}
			got <- l
		}
	}()
	first := filepath.Join(dir, "events_1_"+appID+".zstd")
	writeFile(t, first, zstdBytes(t, joinLines(lines[:4])))
	for i := range 4 {
		if l := <-got; !bytes.Equal(l.Data, lines[i]) {
			t.Fatalf("line %d = %.60q", i, l.Data)
		}
	}
	writeFile(t, filepath.Join(dir, "events_2_"+appID+".zstd"), zstdBytes(t, joinLines(lines[4:8])))
	for i := 4; i < 8; i++ {
		if l := <-got; !bytes.Equal(l.Data, lines[i]) || l.Number != i-3 {
			t.Fatalf("line %d = %.60q (number %d)", i, l.Data, l.Number)
		}
	}
	writeFile(t, filepath.Join(dir, "events_3_"+appID+".zstd"), zstdBytes(t, joinLines(lines[8:])))
	if err := os.Rename(status, strings.TrimSuffix(status, ".inprogress")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("Next after the application completed: %v, want io.EOF", err)
	}
	close(got)
	var rest [][]byte
	for l := range got {
		rest = append(rest, l.Data)
	}
	if len(rest) != 4 || !bytes.Equal(rest[3], lines[11]) {
		t.Fatalf("after the last roll: %d lines, want the last 4", len(rest))
	}
}

func TestNextStopsWhenContextDone(t *testing.T) {
	path := filepath.Join(t.TempDir(), appID)
	writeFile(t, path, nil)
	r := open(t, path, eventlog.Options{Follow: true, Poll: testPoll})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.Next(ctx)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next: %v, want context.Canceled", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := r.Next(context.Background()); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
}

func TestReadStdin(t *testing.T) {
	lines := sparkLines(t)

	t.Run("to EOF", func(t *testing.T) {
		pr, pw := io.Pipe()
		r := open(t, eventlog.Stdin, eventlog.Options{Stdin: pr})
		go func() {
			_, _ = pw.Write(zstdBytes(t, joinLines(lines)))
			_ = pw.Close()
		}()
		got := readAll(t, r)
		wantData(t, got, lines)
		if got[0].Source != "-" || got[11].Number != 12 {
			t.Fatalf("Source, Number = %q, %d", got[0].Source, got[11].Number)
		}
	})

	t.Run("context done while the read blocks", func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		r := open(t, eventlog.Stdin, eventlog.Options{Stdin: pr})
		go func() { _, _ = pw.Write(joinLines(lines[:1])) }()
		ctx := testContext(t)
		if l := next(t, ctx, r); !bytes.Equal(l.Data, lines[0]) {
			t.Fatalf("line = %.60q", l.Data)
		}
		// Nothing more is written: the pump blocks in its read.
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := r.Next(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next: %v, want context.DeadlineExceeded", err)
		}
		// Close closes the injected reader and waits for the pump.
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestReadTruncatedZstd(t *testing.T) {
	lines := sparkLines(t)
	// Flushed after each line, the way Spark writes, then cut in the middle
	// of the last block: what a reader sees of a log Spark is writing.
	var b bytes.Buffer
	w, err := zstd.NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if _, err := w.Write(append(append([]byte{}, l...), '\n')); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	whole := b.Len()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	cut := b.Bytes()[:whole-10]

	t.Run("inprogress: the complete lines, then io.EOF", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), appID+".zstd.inprogress")
		writeFile(t, path, cut)
		wantData(t, readAll(t, open(t, path, eventlog.Options{})), lines[:11])
	})
	t.Run("final name: an error after the complete lines", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), appID+".zstd")
		writeFile(t, path, cut)
		r := open(t, path, eventlog.Options{})
		ctx := testContext(t)
		for i := range 11 {
			if l := next(t, ctx, r); !bytes.Equal(l.Data, lines[i]) {
				t.Fatalf("line %d = %.60q", i, l.Data)
			}
		}
		if _, err := r.Next(ctx); err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "truncated") {
			t.Fatalf("Next on a truncated zstd file: %v, want a truncation error", err)
		}
	})
}
