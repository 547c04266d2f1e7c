package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/client"
)

func TestServeConfigPrecedence(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "harbinger.yaml")
	file := "grpc_addr: 127.0.0.1:9000\nhttp_addr: 127.0.0.1:9001\nshutdown_timeout: 5s\nbroker:\n  max_payload: 2048\n  queue:\n    policy: fifo\n    lease: 1m\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HARBINGER_HTTP_ADDR": "off", "HARBINGER_MAX_ATTEMPTS": "7", "HARBINGER_LEASE": "2m"}
	cfg, err := loadServeConfig([]string{"-config", path, "-lease", "3m"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GRPCAddr != "127.0.0.1:9000" || cfg.HTTPAddr != "off" || cfg.ShutdownTimeout != 5*time.Second ||
		cfg.Broker.MaxPayload != 2048 || cfg.Broker.Queue.Policy != "fifo" || cfg.Broker.Queue.Lease != 3*time.Minute ||
		cfg.Broker.Queue.MaxAttempts != 7 {
		t.Fatalf("cfg = %+v", cfg)
	}
	def, err := loadServeConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil || def.GRPCAddr != DefaultGRPCAddr || def.HTTPAddr != DefaultHTTPAddr {
		t.Fatalf("defaults = %+v, %v", def, err)
	}
	bad := [][]string{{"-lease", "soon"}, {"-max-depth", "-1"}, {"-policy", "lifo"}, {"-log-level", "loud"}, {"-grpc-addr", "nowhere"}}
	for _, args := range bad {
		if _, err := loadServeConfig(args, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("loadServeConfig(%v) = nil error", args)
		}
	}
	if err := os.WriteFile(path, []byte("grpc_adr: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadServeConfig([]string{"-config", path}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("a misspelt key in the config file was accepted")
	}
}

func TestServeRunsAndStops(t *testing.T) {
	t.Parallel()
	cfg := ServeConfig{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}.WithDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	done := make(chan error)
	go func() { done <- serve(ctx, cfg, io.Discard, func(g, _ string) { addrs <- g }) }()
	addr := <-addrs
	cl, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ids, err := cl.Publish(ctx, &client.Message{Queue: "q", Payload: []byte("hi")})
	if err != nil || len(ids) != 1 {
		t.Fatalf("publish = %v, %v", ids, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
