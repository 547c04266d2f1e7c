package client

import (
	"errors"
	"go/build"
	"strings"
	"testing"

	"github.com/harbinger-mq/harbinger/internal/text"
	"github.com/harbinger-mq/harbinger/internal/tlscheck"
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

// connHint keeps internal/tlscheck's rule (the admin CLI's): a hint
// exactly for the causes that say the client and the broker disagree on
// TLS, from either side.
func TestConnHintAgreesWithTLSCheck(t *testing.T) {
	t.Parallel()
	for _, why := range []string{
		"",
		`connection error: desc = "error reading server preface: EOF"`,
		`connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`,
		`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`,
		"délai dépassé \xff",
	} {
		for _, tlsOn := range []bool{false, true} {
			if hinted, want := connHint(why, tlsOn) != "", tlscheck.Mismatch(why, tlsOn); hinted != want {
				t.Errorf("connHint(%q, %v) hints %v, tlscheck.Mismatch says %v", why, tlsOn, hinted, want)
			}
		}
	}
}
