package bench

import "testing"

func harbingerForTest(t *testing.T) Driver {
	t.Helper()
	d := NewHarbinger(HarbingerOptions{})
	t.Cleanup(func() { d.Close() })
	return d
}
