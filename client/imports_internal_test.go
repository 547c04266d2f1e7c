package client

import (
	"errors"
	"go/build"
	"strings"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/text"
)

// The SDK depends only on the public API package, as its package comment
// and the README promise: a program that uses it needs nothing under
// internal/, and the SDK can move to a module of its own.
func TestImportsNoInternal(t *testing.T) {
	t.Parallel()
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports { // not the tests'
		if strings.HasPrefix(imp, "github.com/harbinger-mq/harbinger/") && !strings.HasPrefix(imp, "github.com/harbinger-mq/harbinger/api/") {
			t.Errorf("client imports %s", imp)
		}
	}
}

// reason keeps internal/text's rule for nack reasons (the broker's copy):
// the same text for long multi-byte errors, invalid UTF-8 and cuts that
// fall inside a character.
func TestReasonAgreesWithText(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"",
		"plain failure",
		strings.Repeat("ж€😀", 1<<10),
		"bad \xff\xfe\xc3 bytes",
		strings.Repeat("a", maxReason-1) + "€",
		strings.Repeat("\xff", maxReason),
		strings.Repeat("é", maxReason),
	} {
		if got, want := reason(errors.New(s)), text.Clean(s, maxReason); got != want {
			t.Errorf("reason(%.20q...) = %.20q... (%d bytes), want %.20q... (%d bytes)", s, got, len(got), want, len(want))
		}
	}
}
