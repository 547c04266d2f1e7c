package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// HarbingerBinary returns the harbinger executable the out-of-process arms
// start (harbinger serve, harbinger sidecar): $HARBINGER_BIN when set,
// otherwise the product's cmd/harbinger built with go build, once, into
// buildDir, from the module this program runs in (the lab's, which
// requires the product's).
func HarbingerBinary(ctx context.Context, buildDir string) (string, error) {
	if p := os.Getenv("HARBINGER_BIN"); p != "" {
		return p, nil
	}
	return build(ctx, buildDir, "harbinger", "github.com/harbinger-mq/harbinger/cmd/harbinger")
}

// LabBinary returns the harbinger-lab executable that serves the bare
// queues (harbinger-lab bench bare-queue-server, bare-tcp-server): this
// program when it is harbinger-lab, otherwise (a test binary, name ending
// in .test) lab/cmd/harbinger-lab built into buildDir.
func LabBinary(ctx context.Context, buildDir string) (string, error) {
	exe, err := os.Executable()
	if err == nil && !strings.HasSuffix(filepath.Base(exe), ".test") {
		return exe, nil
	}
	return build(ctx, buildDir, "harbinger-lab", "github.com/harbinger-mq/harbinger/lab/cmd/harbinger-lab")
}

func build(ctx context.Context, buildDir, name, pkg string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", fmt.Errorf("bench: finding the module to build %s from (or set HARBINGER_BIN): %w", name, err)
	}
	if buildDir == "" {
		buildDir = os.TempDir()
	}
	out := filepath.Join(buildDir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("bench: go build %s: %v: %s", pkg, err, b)
	}
	return out, nil
}

// moduleRoot is the directory of the go.mod of the working directory.
func moduleRoot(ctx context.Context) (string, error) {
	b, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(mod), nil
}
