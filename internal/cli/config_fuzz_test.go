package cli

import (
	"bytes"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzServeConfig reads config files of any content: no panic, and a
// config that passes Validate writes back (yaml.Marshal) to a file that
// reads as the same config and passes again.
func FuzzServeConfig(f *testing.F) {
	for _, s := range []string{
		"grpc_addr: 127.0.0.1:7070\nhttp_addr: 127.0.0.1:7071\nshutdown_timeout: 30s\nlog_level: info\n" +
			"broker:\n  max_payload: 1048576\n  max_bytes: 1073741824\n  max_queues: 1024\n  queue:\n    policy: bounded\n    tiers: 3\n    lease: 30s\n    max_attempts: 5\n    max_depth: 1000000\n",
		"memory: true\nfsync: interval=10ms\n",
		"fsync: interval=-1s\n",
		"broker:\n  max_payload: 999999999999\n",
		"broker:\n  queue:\n    policy: weighted\n    weights: [8, 3, 1]\n    aging: [1s, 2s]\n",
		"log_level: \"\\xff\"\nhttp_addr: off\n",
		"shutdown_timeout: 9999999999h\n",
		"unknown: 1\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := decodeServeConfig(data)
		if err != nil {
			return
		}
		cfg = cfg.WithDefaults()
		if cfg.Validate() != nil {
			return
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("a valid config does not marshal: %v", err)
		}
		again, err := decodeServeConfig(out)
		if err != nil {
			t.Fatalf("a valid config written back does not read: %v\n%s", err, out)
		}
		again = again.WithDefaults()
		if err := again.Validate(); err != nil {
			t.Fatalf("a valid config written back is not valid: %v\n%s", err, out)
		}
		// Equal as written (an empty list and none are the same setting).
		if out2, err := yaml.Marshal(again); err != nil || !bytes.Equal(out2, out) {
			t.Fatalf("a valid config written back reads differently (%v):\n%s\n%s", err, out, out2)
		}
	})
}
