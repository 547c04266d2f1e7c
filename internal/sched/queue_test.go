package sched

import (
	"math"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/predict"
)

// The predictor predicts the configured tiers whatever the policy routes
// by; a policy whose tiers are levels predicts one tier per level.
func TestQueuePredictorTiers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		policy        string
		opts          PolicyOptions
		levels, tiers int
	}{
		{"shadow", Shadow, PolicyOptions{}, 1, predict.DefaultTiers},
		{"shadow 5 tiers", Shadow, PolicyOptions{Tiers: 5}, 1, 5},
		{"fifo 4 tiers", FIFO, PolicyOptions{Tiers: 4}, 1, 4},
		{"static widened by its map", Static, PolicyOptions{Tiers: 2, StaticTiers: map[string]int{"a": 4}}, 5, 2},
		{"bounded", Bounded, PolicyOptions{}, predict.DefaultTiers, predict.DefaultTiers},
		{"weighted 2 tiers", WeightedP, PolicyOptions{Tiers: 2}, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pol, err := NewPolicy(tt.policy, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			q, err := NewQueue(pol, predict.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if got := q.Config().Levels; got != tt.levels {
				t.Errorf("levels %d, want %d", got, tt.levels)
			}
			if got := q.Predictor.Config().Tiers; got != tt.tiers {
				t.Errorf("predictor tiers %d, want %d", got, tt.tiers)
			}
		})
	}
}

// A shadow queue fed two warm keys, one of 1 ms jobs and one of 500 ms
// jobs, predicts them into different tiers, serves everything FIFO from
// level 0, and scores its predictions against the durations.
func TestShadowPredictsTiers(t *testing.T) {
	t.Parallel()
	pol, err := NewPolicy(Shadow, PolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := NewQueue(pol, predict.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fast, slow := q.Predictor.KeyFor("q", "p", "fast", 0), q.Predictor.KeyFor("q", "p", "slow", 0)
	costs := map[predict.Key]time.Duration{fast: time.Millisecond, slow: 500 * time.Millisecond}
	id := uint64(0)
	type job struct {
		it *Item
		k  predict.Key
		pr predict.Prediction
	}
	publish := func(k predict.Key) job {
		id++
		j := job{it: &Item{ID: id}, k: k}
		j.pr = q.Classify(j.it, k)
		if j.it.Tier != 0 {
			t.Fatalf("message %d routed to level %d, want 0", id, j.it.Tier)
		}
		if err := q.Push(j.it, t0); err != nil {
			t.Fatal(err)
		}
		return j
	}
	// serve pops every waiting message, checks they come in publish
	// order, and acks each with actual(i), i counting from 0.
	serve := func(jobs []job, actual func(i int, j job) time.Duration) {
		t.Helper()
		for i, j := range jobs {
			if got := q.Pop(t0); got != j.it {
				t.Fatalf("pop %d = %+v, want message %d (FIFO)", i, got, j.it.ID)
			}
			if err := q.Learn(j.k, j.pr, actual(i, j)); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Warm-up: three of each (DefaultMinObservations), all cold.
	var warm []job
	for range predict.DefaultMinObservations {
		warm = append(warm, publish(fast), publish(slow))
	}
	serve(warm, func(_ int, j job) time.Duration { return costs[j.k] })
	if s := q.Predictor.Summary(); s.TierSamples != 0 || !math.IsNaN(s.TierAccuracy) {
		t.Fatalf("after cold predictions only: accuracy %v over %d, want NaN over 0", s.TierAccuracy, s.TierSamples)
	}

	// Sixteen warm predictions, alternating. Worked by hand: the
	// boundaries settle at [1 ms, sqrt(1*500) ms] from the second
	// prediction on, so 1 ms jobs take tier 0 and 500 ms jobs tier 2.
	var jobs []job
	for range 8 {
		jobs = append(jobs, publish(fast), publish(slow))
	}
	tiers := map[int]int{}
	for _, j := range jobs {
		if !j.pr.Routed() {
			t.Fatalf("prediction %+v of a warm key, want routed", j.pr)
		}
		want := 0
		if j.k == slow {
			want = 2
		}
		if j.pr.Tier != want {
			t.Errorf("%s predicted into tier %d, want %d", j.k.JobType, j.pr.Tier, want)
		}
		tiers[j.pr.Tier]++
	}
	if len(tiers) < 2 {
		t.Errorf("predicted tiers %v, want more than one", tiers)
	}
	if q.LevelLen(0) != len(jobs) {
		t.Errorf("level 0 holds %d of %d messages", q.LevelLen(0), len(jobs))
	}
	// Three predictions are wrong: two fast jobs run 500 ms (tier 2), one
	// slow job runs 5 ms (tier 1).
	serve(jobs, func(i int, j job) time.Duration {
		switch i {
		case 2, 6:
			return 500 * time.Millisecond
		case 9:
			return 5 * time.Millisecond
		}
		return costs[j.k]
	})
	s := q.Predictor.Summary()
	if s.TierSamples != 16 || s.TierAccuracy != 13.0/16 {
		t.Errorf("tier accuracy %v over %d, want 13/16 = %v over 16", s.TierAccuracy, s.TierSamples, 13.0/16)
	}
	// |1-500| twice and |500-5| once, over 16.
	if want := time.Duration((499 + 499 + 495) * float64(time.Millisecond) / 16); s.MAESamples != 16 || s.MAE != want {
		t.Errorf("MAE %v over %d, want %v over 16", s.MAE, s.MAESamples, want)
	}
}

// The bounded policy asks its predictor for its own long share; a share set
// in the predictor's configuration wins, and other policies keep the
// predictor's default.
func TestQueueLongShare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy string
		pcfg   predict.Config
		want   float64
	}{
		{"bounded", Bounded, predict.Config{}, DefaultLongShare},
		{"bounded, share configured", Bounded, predict.Config{LongShare: 0.3}, 0.3},
		{"fifo", FIFO, predict.Config{}, predict.DefaultLongShare},
		{"predictive", Predictive, predict.Config{}, predict.DefaultLongShare},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pol, err := NewPolicy(tt.policy, PolicyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			q, err := NewQueue(pol, tt.pcfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := q.Predictor.Config().LongShare; got != tt.want {
				t.Errorf("long share %v, want %v", got, tt.want)
			}
		})
	}
}
