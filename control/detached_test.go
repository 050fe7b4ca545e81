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

// A tracker detaches its advance once; what it keeps and what ownership
// holds share that copy, and its ids and unchanged sources are the
// tracker's own (issue 12): DetachedLike copies only what differs from
// like, and Detached of a detached advance copies nothing.
func TestDetachedLikeSharesWhatIsEqual(t *testing.T) {
	doc := []byte(`q-1r-1{"lsn":7}cdc-source`)
	s := string(doc)
	like := control.Advance{QueryID: "q-1", RunID: "r-1", Sources: []string{"cdc-source"}}
	a := control.Advance{Table: "t", QueryID: s[0:3], RunID: s[3:6], EndOffset: json.RawMessage(doc[6:15]), Sources: []string{s[15:]}}
	d := a.DetachedLike(&like)
	if unsafe.StringData(d.QueryID) != unsafe.StringData(like.QueryID) || unsafe.StringData(d.RunID) != unsafe.StringData(like.RunID) {
		t.Error("the ids equal to like's are copies")
	}
	if unsafe.SliceData(d.Sources) != unsafe.SliceData(like.Sources) {
		t.Error("the sources equal to like's are a copy")
	}
	if unsafe.SliceData(d.EndOffset) == unsafe.SliceData(a.EndOffset) || string(d.EndOffset) != `{"lsn":7}` {
		t.Errorf("the end offset is %q, a slice of the document or changed", d.EndOffset)
	}
	again := d.Detached()
	if unsafe.SliceData(again.EndOffset) != unsafe.SliceData(d.EndOffset) || unsafe.SliceData(again.Sources) != unsafe.SliceData(d.Sources) {
		t.Error("Detached of a detached advance copied it")
	}
	// What differs from like is copied, not shared with the document.
	other := control.Advance{QueryID: "q-2", RunID: "r-1", Sources: []string{"kafka"}}
	e := a.DetachedLike(&other)
	if unsafe.StringData(e.QueryID) == unsafe.StringData(a.QueryID) || e.QueryID != "q-1" {
		t.Error("a query id unlike like's is not a copy")
	}
	if unsafe.StringData(e.Sources[0]) == unsafe.StringData(a.Sources[0]) || e.Sources[0] != "cdc-source" {
		t.Error("sources unlike like's are not a copy")
	}
	if n := testing.AllocsPerRun(100, func() { _ = d.Detached() }); n != 0 {
		t.Errorf("Detached of a detached advance allocates %.0f times", n)
	}
}
