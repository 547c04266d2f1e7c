package cli

import (
	"io"
	"strings"
	"testing"
)

// Flags of bench flow that cannot go together are refused before
// anything starts.
func TestBenchFlowModeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--harbinger-in-process", "--harbinger-durable"}, "exclude each other"},
		{[]string{"--data-dir", t.TempDir()}, "--data-dir needs --harbinger-durable"},
	} {
		err := runBenchFlow(t.Context(), append(tc.args, "--out", ""), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench flow %v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
