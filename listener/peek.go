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
	if bytes.Count(d, keyBatchID) != 1 || bytes.Count(d, keyRunID) != 1 || bytes.Contains(d, escapeU) {
		return 0, false
	}
	v, ok := peekValue(d, keyBatchID)
	if !ok {
		return 0, false
	}
	batch, ok := peekInt(d[v:])
	if !ok {
		return 0, false
	}
	v, ok = peekValue(d, keyRunID)
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

// peekValue returns the offset of the value of the first member whose key
// token is key.
func peekValue(d, key []byte) (int, bool) {
	i := bytes.Index(d, key)
	if i < 0 {
		return 0, false
	}
	j := skipWhite(d, i+len(key))
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
