package fair

import (
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/harbinger-mq/harbinger/internal/sched"
)

// BenchmarkDecision is the cost of one scheduling decision (a Pop, the
// Done of the job it started and the push of its replacement) against the
// number of keys: each key a tenant with a limit of 1 and a group of its
// own, half of them at their limit with a job running throughout, and two
// jobs waiting in every key.
func BenchmarkDecision(b *testing.B) {
	pol, err := sched.NewPolicy(sched.DefaultPolicy, sched.PolicyOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, keys := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			tb := setup(b, Config{GroupBy: Tenant, Limits: []Limit{{Field: Tenant, Max: 1}}}, pol.Sched)
			tb.f.SetWorkers(keys, tb.now)
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("tenant-%d-ü", i)
			}
			for i := range keys {
				tb.push(b, Keys{Tenant: names[i]}, time.Duration(1+i%7)*time.Millisecond)
				tb.push(b, Keys{Tenant: names[i]}, time.Duration(1+i%5)*time.Millisecond)
			}
			// Half the keys at their limit for the whole run.
			for range keys / 2 {
				tb.f.Pop(tb.now)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				tb.now = tb.now.Add(time.Microsecond)
				it := tb.f.Pop(tb.now)
				if it == nil {
					b.Fatal("nothing eligible")
				}
				ki := (*keysItem)(unsafe.Pointer(it))
				tb.f.Done(it, tb.now)
				ki.it = sched.Item{ID: tb.id + 1, Cost: ki.it.Cost}
				tb.id++
				if err := tb.f.Push(&ki.it, tb.now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
