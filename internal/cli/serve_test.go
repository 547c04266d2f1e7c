package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/client"
	"github.com/harbinger-mq/harbinger/internal/store"
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
	cfg := ServeConfig{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second, DataDir: t.TempDir()}.WithDefaults()
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

// runServe starts serve on cfg and returns its gRPC address and a stop
// function that returns serve's error.
func runServeFor(t *testing.T, cfg ServeConfig) (string, func() error) {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ShutdownTimeout = "127.0.0.1:0", "off", 5*time.Second
	cfg = cfg.WithDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, io.Discard, func(g, _ string) { addrs <- g }) }()
	select {
	case a := <-addrs:
		return a, func() error { cancel(); return <-done }
	case err := <-done:
		cancel()
		return "", func() error { return err }
	}
}

// A new user's test: 1,000 jobs and what the broker learned survive a
// restart of a default (durable) broker.
func TestServeKeepsJobsAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr, stop := runServeFor(t, ServeConfig{DataDir: dir})
	ctx := t.Context()
	cl, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]*client.Message, 1000)
	for i := range msgs {
		msgs[i] = &client.Message{Queue: "q", Producer: "web", JobType: "thumbnail", Payload: []byte(fmt.Sprintf("job %d ✓", i))}
	}
	ids, err := cl.Publish(ctx, msgs...)
	if err != nil || len(ids) != len(msgs) {
		t.Fatalf("publish: %d ids, %v", len(ids), err)
	}
	cl.Close()

	// A second broker on the same directory is refused while the first runs.
	if _, stop2 := runServeFor(t, ServeConfig{DataDir: dir}); !errors.Is(stop2(), store.ErrLocked) {
		t.Fatal("a second broker started on a directory in use")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	addr, stop = runServeFor(t, ServeConfig{DataDir: dir})
	defer stop()
	cl, err = client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	q, err := cl.Queue(ctx, "q")
	if err != nil || q.Ready != uint64(len(msgs)) {
		t.Fatalf("after a restart: %v, %v", q, err)
	}
}

func TestServeCPUProfile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cpu.prof")
	_, stop := runServeFor(t, ServeConfig{Memory: true, CPUProfile: path})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("profile: %v, %v", st, err)
	}
	_, stop = runServeFor(t, ServeConfig{Memory: true, CPUProfile: filepath.Join(t.TempDir(), "no", "such", "dir", "p")})
	if err := stop(); err == nil {
		t.Fatal("an unwritable profile path was accepted")
	}
}
