package unique

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The index against a reference model: a plain map of every claim, where a
// key is held while now is before its latest claim's end. Random claims,
// re-claims of held and expired keys, lookups and time passing.
func TestIndexAgainstModel(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 3))
		var x Index
		model := map[string]Entry{}
		now := t0
		for step := range 2000 {
			key := fmt.Sprintf("kéy-%d", rng.IntN(40))
			switch rng.IntN(4) {
			case 0:
				e := Entry{ID: fmt.Sprint("job-", step), Until: now.Add(time.Duration(rng.IntN(60)) * time.Second)}
				x.Claim(key, e.ID, e.Until)
				model[key] = e
			case 1:
				now = now.Add(time.Duration(rng.IntN(10)) * time.Second)
			default:
				got, ok := x.Lookup(key, now)
				want, held := model[key]
				held = held && want.Until.After(now)
				if ok != held || ok && got != want {
					t.Fatalf("seed %d step %d: Lookup(%s) = %v, %v; want %v, %v", seed, step, key, got, ok, want, held)
				}
			}
			open := 0
			for _, e := range model {
				if e.Until.After(now) {
					open++
				}
			}
			if n := x.Len(now); n != open {
				t.Fatalf("seed %d step %d: Len = %d, want %d", seed, step, n, open)
			}
		}
		// Memory follows the open windows: every expiry left is pending.
		now = now.Add(time.Hour)
		if x.Len(now) != 0 || len(x.exp) != 0 {
			t.Fatalf("seed %d: after every window closed, %d keys and %d expiries are held", seed, len(x.keys), len(x.exp))
		}
	}
}
