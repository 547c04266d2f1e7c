package rmqcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string // "" for valid
	}{
		{Config{}, ""},
		{Config{Nodes: 1}, ""},
		{Config{Nodes: 5}, ""},
		{Config{Nodes: -1}, "at least one node"},
		{Config{StartTimeout: -1}, "must not be negative"},
	} {
		err := tc.cfg.WithDefaults().validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: validate() = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := Start(context.Background(), Config{Nodes: -2}); err == nil {
		t.Error("Start took a negative node count")
	}
}

func TestNodeURL(t *testing.T) {
	t.Parallel()
	n := &Node{AMQPPort: 5999}
	if got, want := n.URL(), "amqp://guest:guest@127.0.0.1:5999/"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
}

// ReapOrphans kills the VMs of a cluster whose owner is gone and removes
// its directory, leaves alone a process whose pid a beam.pid names but
// which is not that cluster's (a reused pid), and leaves alone a cluster
// whose owner lives.
func TestReapOrphans(t *testing.T) {
	parent := t.TempDir()
	start := func(dir string, mention bool) *exec.Cmd {
		t.Helper()
		cmd := exec.Command("sleep", "60")
		cmd.Env = os.Environ()
		if mention {
			cmd.Env = append(cmd.Env, "RABBITMQ_PID_FILE="+filepath.Join(dir, "n1", "beam.pid"))
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	cluster := func(name string, owner, nodes int) string {
		t.Helper()
		dir := filepath.Join(parent, "harbinger-rmqcluster-"+name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(owner)), 0o644); err != nil {
			t.Fatal(err)
		}
		for i := range nodes {
			if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("n%d", i+1)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	writePid := func(dir string, i int, cmd *exec.Cmd) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("n%d", i), "beam.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := cluster("orphan", gone.Process.Pid, 2)
	vm := start(orphan, true)
	stranger := start(orphan, false) // a pid reused by something else
	writePid(orphan, 1, vm)
	writePid(orphan, 2, stranger)
	live := cluster("live", os.Getpid(), 1)
	liveVM := start(live, true)
	writePid(live, 1, liveVM)

	did := ReapOrphans(parent)
	if len(did) != 1 || !strings.Contains(did[0], "killed 1 nodes") {
		t.Fatalf("ReapOrphans did %q, want one orphan with 1 node killed", did)
	}
	if err := vm.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the orphan's VM ended with %v, want killed", err)
	}
	for _, cmd := range []*exec.Cmd{stranger, liveVM} {
		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("pid %d was killed: %v", cmd.Process.Pid, err)
		}
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("the orphan's directory is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(live, "n1", "beam.pid")); err != nil {
		t.Fatalf("the live cluster's directory was touched: %v", err)
	}
	if did := ReapOrphans(parent); len(did) != 0 {
		t.Fatalf("a second pass did %q", did)
	}
}
