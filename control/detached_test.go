package control_test

import (
	"encoding/json"
	"testing"
	"unsafe"

	"github.com/finalizer-dev/finalizer/control"
)

// An advance kept after its statement shares no memory with the parsed
// progress: its end offset, source descriptions and ids were slices of the
// document's buffers, which it kept alive whole (issue 12).
func TestDetachedSharesNoMemory(t *testing.T) {
	doc := []byte(`q-1r-1{"lsn":7,"commit_ts":"2026-12-01T00:00:00"}cdc-source`)
	s := string(doc)
	a := control.Advance{Table: "t", QueryID: s[0:3], RunID: s[3:6], EndOffset: json.RawMessage(doc[6:50]), Sources: []string{s[50:]}}
	d := a.Detached()
	within := func(p unsafe.Pointer, base unsafe.Pointer, n int) bool {
		return uintptr(p) >= uintptr(base) && uintptr(p) < uintptr(base)+uintptr(n)
	}
	sb, db := unsafe.Pointer(unsafe.StringData(s)), unsafe.Pointer(unsafe.SliceData(doc))
	for name, p := range map[string]unsafe.Pointer{
		"query id": unsafe.Pointer(unsafe.StringData(d.QueryID)), "run id": unsafe.Pointer(unsafe.StringData(d.RunID)),
		"source": unsafe.Pointer(unsafe.StringData(d.Sources[0])),
	} {
		if within(p, sb, len(s)) {
			t.Errorf("the detached %s is a slice of the document", name)
		}
	}
	if within(unsafe.Pointer(unsafe.SliceData(d.EndOffset)), db, len(doc)) {
		t.Error("the detached end offset is a slice of the document")
	}
	if d.QueryID != a.QueryID || d.RunID != a.RunID || string(d.EndOffset) != string(a.EndOffset) || d.Sources[0] != a.Sources[0] || d.Table != a.Table {
		t.Errorf("Detached changed the advance: %+v, want %+v", d, a)
	}
	if (control.Advance{}).Detached().Sources != nil {
		t.Error("Detached of no sources made some")
	}
}
