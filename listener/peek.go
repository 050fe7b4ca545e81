package listener

import "bytes"

// The keys peekProgress looks for, with their quotes.
var (
	keyBatchID = []byte(`"batchId"`)
	keyRunID   = []byte(`"runId"`)
	escapeU    = []byte(`\u`)
)

// peekProgress reads, without parsing, the batch id of a progress document
// (the integer of its only "batchId" member) and checks that its only
// "runId" member is runID (ASCII case aside). It reports false when either
// is not found where and as expected, is there more than once, or the
// document holds a \u escape. A quote inside a JSON string is
// escaped, so the keys cannot be matched inside a string value. The one
// occurrence could be a nested object's key when the progress has none of
// its own: the parser then finds the document malformed, and the slot
// checks a waiting message before it refuses an older one for it (Take
// parses and checks every progress it hands out). It never allocates.
func peekProgress(d []byte, runID string) (int64, bool) {
	// The parser reads the batchId member of the progress object, and
	// refuses it repeated; the peek must never read another. So it takes
	// only the one literal occurrence of each key, and gives up on a
	// document with a \u escape, which could spell a key the parser would
	// decode (a doubled batchId once made the two disagree, and a good
	// progress lost to the one that peeked higher).
	batchAt, runAt, ok := findKeys(d)
	if !ok || bytes.Contains(d, escapeU) {
		return 0, false
	}
	v, ok := valueAfter(d, batchAt+len(keyBatchID))
	if !ok {
		return 0, false
	}
	batch, ok := peekInt(d[v:])
	if !ok {
		return 0, false
	}
	v, ok = valueAfter(d, runAt+len(keyRunID))
	if !ok || len(d)-v < len(runID)+2 || d[v] != '"' || d[v+1+len(runID)] != '"' {
		return 0, false
	}
	for i := 0; i < len(runID); i++ {
		if d[v+1+i]|0x20 != runID[i]|0x20 {
			return 0, false
		}
	}
	return batch, true
}

// findKeys returns the offsets of the one literal "batchId" and the one
// literal "runId" key token in d (with their quotes); ok is false unless
// each occurs exactly once. It is bytes.Count and bytes.Index of both in
// one pass: each token holds one capital I (a rare byte in a progress,
// where '"', the tokens' first byte, is one byte in ten), so it looks at
// the capital Is only.
func findKeys(d []byte) (batchAt, runAt int, ok bool) {
	const (
		batchI = 6 // "batchId": the I's index in the token
		runI   = 4 // "runId"
	)
	nb, nr := 0, 0
	for i := 0; ; i++ {
		k := bytes.IndexByte(d[i:], 'I')
		if k < 0 {
			break
		}
		i += k
		if i >= batchI && i-batchI+len(keyBatchID) <= len(d) && string(d[i-batchI:i-batchI+len(keyBatchID)]) == string(keyBatchID) {
			nb++
			batchAt = i - batchI
		} else if i >= runI && i-runI+len(keyRunID) <= len(d) && string(d[i-runI:i-runI+len(keyRunID)]) == string(keyRunID) {
			nr++
			runAt = i - runI
		}
	}
	return batchAt, runAt, nb == 1 && nr == 1
}

// valueAfter returns the offset of the value of the member whose key
// token ends at d[i].
func valueAfter(d []byte, i int) (int, bool) {
	j := skipWhite(d, i)
	if j >= len(d) || d[j] != ':' {
		return 0, false
	}
	j = skipWhite(d, j+1)
	return j, j < len(d)
}

// peekInt reads a JSON integer (no fraction, no exponent) at the start of
// d, which must end there with a delimiter.
func peekInt(d []byte) (int64, bool) {
	i, neg := 0, false
	if i < len(d) && d[i] == '-' {
		neg, i = true, 1
	}
	start := i
	var n int64
	for ; i < len(d) && d[i] >= '0' && d[i] <= '9'; i++ {
		if i-start >= 18 {
			return 0, false
		}
		n = n*10 + int64(d[i]-'0')
	}
	if i == start || i >= len(d) {
		return 0, false
	}
	switch d[i] {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
	default:
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

func skipWhite(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}
