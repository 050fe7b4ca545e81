package eventlog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Spark event log file name suffixes (EventLogFileWriter.IN_PROGRESS and
// EventLogFileWriter.COMPACTED).
const (
	inProgressSuffix = ".inprogress"
	compactedSuffix  = ".compact"
)

// codec is how the bytes of one file are encoded.
type codec int

const (
	codecSniff codec = iota // no codec in the name: look at the first bytes
	codecZstd
)

// codecFromName returns the codec named by a Spark event log file name: the
// last dot-extension once ".inprogress" and ".compact" are stripped, the
// way Spark's EventLogFileWriter.codecName reads it. Spark's codecs other
// than zstd are refused with an error wrapping ErrUnsupportedCodec; any
// other extension (".json", ".log", none) is sniffed from the content.
func codecFromName(name string) (codec, error) {
	base := filepath.Base(name)
	base = strings.TrimSuffix(base, inProgressSuffix)
	base = strings.TrimSuffix(base, compactedSuffix)
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(base), "."))
	switch ext {
	case "zstd", "zst":
		return codecZstd, nil
	case "lz4", "lzf", "snappy":
		return 0, unsupported(name, ext)
	case "gz", "gzip", "bz2", "xz", "deflate":
		return 0, unsupported(name, ext)
	}
	return codecSniff, nil
}

// unsupported returns the error for a file compressed with a codec this
// package cannot read, saying what to change on the Spark side.
func unsupported(name, codec string) error {
	return fmt.Errorf("%s: %w %q: finalizer reads uncompressed and zstd event logs; "+
		"set spark.eventLog.compression.codec=zstd (or spark.eventLog.compress=false) for the application",
		name, ErrUnsupportedCodec, codec)
}

// Magic numbers of the streams Spark's codecs write, and of gzip.
var (
	magicZstd   = []byte{0x28, 0xb5, 0x2f, 0xfd}
	magicLZ4    = []byte("LZ4Block")                            // net.jpountz LZ4BlockOutputStream
	magicSnappy = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0} // xerial SnappyOutputStream
	magicLZF    = []byte("ZV")                                  // ning LZF chunk
	magicGzip   = []byte{0x1f, 0x8b}
)

// sniff decides the codec of a file whose name does not say it, from its
// first bytes. A JSON event log starts with '{' (or blank space); anything
// else is matched against the magic numbers of zstd and of Spark's other
// codecs. It returns codecSniff for plain text.
func sniff(name string, br *bufio.Reader) (codec, error) {
	first, err := br.Peek(1)
	if err != nil {
		return codecSniff, err
	}
	switch first[0] {
	case '{', ' ', '\t', '\r', '\n':
		return codecSniff, nil
	}
	head, err := br.Peek(len(magicLZ4))
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return codecSniff, err
	}
	switch {
	case bytes.HasPrefix(head, magicZstd):
		return codecZstd, nil
	case bytes.HasPrefix(head, magicLZ4):
		return 0, unsupported(name, "lz4")
	case bytes.HasPrefix(head, magicSnappy):
		return 0, unsupported(name, "snappy")
	case bytes.HasPrefix(head, magicLZF):
		return 0, unsupported(name, "lzf")
	case bytes.HasPrefix(head, magicGzip):
		return 0, unsupported(name, "gzip")
	}
	return codecSniff, nil
}

// newZstd returns a zstd stream decoder over r that decodes synchronously
// (no decoder goroutines), so a read that waits for a growing file happens
// inside the caller's Next, where its context applies.
func newZstd(r io.Reader) (*zstd.Decoder, error) {
	return zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
}
