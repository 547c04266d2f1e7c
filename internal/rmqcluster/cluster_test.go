package rmqcluster

import (
	"context"
	"strings"
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
