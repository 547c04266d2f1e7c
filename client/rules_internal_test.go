package client

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// rules is testdata/rules.json: inputs and the answers of the broker's own
// rules (internal/text for nack reasons, internal/tlscheck for TLS hints),
// which this module cannot import. The root module's internal/sdk checks
// the same file against those rules, so the SDK's copies and the broker's
// agree through it. Strings are bytes (base64) so that invalid UTF-8
// survives JSON.
type rules struct {
	MaxReason int
	Reasons   []struct{ In, Out []byte }
	Hints     []struct {
		Why  []byte
		TLS  bool
		Hint bool
	}
}

func loadRules(t *testing.T) rules {
	t.Helper()
	b, err := os.ReadFile("testdata/rules.json")
	if err != nil {
		t.Fatal(err)
	}
	var r rules
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// reason keeps the broker's rule for nack reasons: the same text for long
// multi-byte errors, invalid UTF-8 and cuts that fall inside a character.
func TestReasonAgreesWithText(t *testing.T) {
	t.Parallel()
	r := loadRules(t)
	if r.MaxReason != maxReason {
		t.Fatalf("testdata/rules.json was made for maxReason %d, the SDK's is %d", r.MaxReason, maxReason)
	}
	for _, c := range r.Reasons {
		if got := reason(errors.New(string(c.In))); got != string(c.Out) {
			t.Errorf("reason(%.20q...) = %.20q... (%d bytes), want %.20q... (%d bytes)", c.In, got, len(got), c.Out, len(c.Out))
		}
	}
}

// connHint keeps the admin CLI's rule (internal/tlscheck): a hint exactly
// for the causes that say the client and the broker disagree on TLS, from
// either side.
func TestConnHintAgreesWithTLSCheck(t *testing.T) {
	t.Parallel()
	for _, c := range loadRules(t).Hints {
		if hinted := connHint(string(c.Why), c.TLS) != ""; hinted != c.Hint {
			t.Errorf("connHint(%q, %v) hints %v, the broker's rule says %v", c.Why, c.TLS, hinted, c.Hint)
		}
	}
}
