package control

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckTableNameRefusesBidiControls: a name with a bidirectional
// formatting character (U+202E RIGHT-TO-LEFT OVERRIDE, the isolates, the
// marks) is refused like one with a control character: it would show
// another name than its own in `finalizer status` and on the status page.
// Other non-ASCII names stay valid.
func TestCheckTableNameRefusesBidiControls(t *testing.T) {
	for _, r := range []rune{'\u061c', '\u200e', '\u200f', '\u202a', '\u202b', '\u202c', '\u202d', '\u202e', '\u2066', '\u2067', '\u2068', '\u2069'} {
		name := "bronze.cdc_" + string(r) + "sredro"
		err := CheckTableName(name)
		if !errors.Is(err, ErrInvalidTable) || !strings.Contains(err.Error(), "bidirectional") {
			t.Errorf("%U: %v", r, err)
		}
	}
	for _, name := range []string{"bronze.orders", "silver.commandes_été", "金.注文", "طلبات.برونز", "a\u200db"} {
		if err := CheckTableName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
}
