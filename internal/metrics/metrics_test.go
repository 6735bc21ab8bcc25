package metrics

import (
	"slices"
	"testing"
)

// TestRegistryFamilies: the broker's families report what was counted, each under its
// label values; a family of one unlabelled series reports it from the start.
func TestRegistryFamilies(t *testing.T) {
	r := New(nil)
	r.ConnectionsCurrent.WithLabelValues("tcp").Inc()
	r.ConnectionsCurrent.WithLabelValues("tcp").Add(2)
	r.ConnectionsTotal.WithLabelValues("tcp").Inc()
	r.MessagesDropped.WithLabelValues("queue_full").Inc()
	r.MessagesReceived[1].Inc()
	r.MessagesSent[2].Add(3)
	r.Subscriptions.Set(7)

	s := r.Sums()
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"bifrost_connections_current", "tcp", 3},
		{"bifrost_connections_total", "tcp", 1},
		{"bifrost_messages_dropped_total", "queue_full", 1},
		{"bifrost_messages_received_total", "0", 0},
		{"bifrost_messages_received_total", "1", 1},
		{"bifrost_messages_sent_total", "2", 3},
		{"bifrost_subscriptions_current", "", 7},
		{"bifrost_bytes_received_total", "", 0},
		{"bifrost_bytes_sent_total", "", 0},
		{"bifrost_retained_messages_current", "", 0},
		{"bifrost_load", "", 0},
	} {
		got, ok := s[c.name][c.labels]
		if !ok || got != c.want {
			t.Errorf("%s{%s} = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	// A labelled family with no series resolved reports nothing, as Prometheus's vectors.
	if _, ok := s["bifrost_denied_total"]; ok {
		t.Errorf("bifrost_denied_total reported with no series: %v", s["bifrost_denied_total"])
	}
}

// TestRegistriesIndependent checks that two brokers in one process keep separate counts.
func TestRegistriesIndependent(t *testing.T) {
	a, b := New(nil), New(nil)
	a.BytesSent.Add(10)
	if v := b.Sums()["bifrost_bytes_sent_total"][""]; v != 0 {
		t.Fatalf("b's bytes sent = %v after adding to a's", v)
	}
}

// TestRegisterTwice: a family name is registered once.
func TestRegisterTwice(t *testing.T) {
	r := New(nil)
	if err := r.Register(NewGaugeFunc("bifrost_x", "x", func() float64 { return 1 })); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(NewGaugeFunc("bifrost_x", "x", func() float64 { return 1 })); err == nil {
		t.Fatal("bifrost_x registered twice")
	}
	if err := r.Register(NewCounterVec("bifrost_bytes_sent_total", "x")); err == nil {
		t.Fatal("the broker's own family registered again")
	}
}

// collected is a Writer that keeps the histograms it is given.
type collected struct{ hists []HistogramValue }

func (c *collected) Value(*Desc, float64, ...string) {}
func (c *collected) Histogram(_ *Desc, h HistogramValue, _ ...string) {
	c.hists = append(c.hists, h)
}

// TestHistogram: an observation falls into the first bucket whose bound is at least it
// (Prometheus's le), the buckets are cumulative and the count includes +Inf.
func TestHistogram(t *testing.T) {
	h := NewHistogram("bifrost_h", "h", []float64{1, 2, 5})
	for _, v := range []float64{0.5, 1, 1.5, 2, 4, 9} {
		h.Observe(v)
	}
	var c collected
	h.Collect(&c)
	if len(c.hists) != 1 {
		t.Fatalf("%d histograms collected, want 1", len(c.hists))
	}
	got := c.hists[0]
	if want := []uint64{2, 4, 5}; !slices.Equal(got.Cumulative, want) {
		t.Errorf("cumulative buckets %v, want %v", got.Cumulative, want)
	}
	if got.Count != 6 || got.Sum != 18 {
		t.Errorf("count %d sum %v, want 6 and 18", got.Count, got.Sum)
	}
	r := New(nil)
	if err := r.Register(h); err != nil {
		t.Fatal(err)
	}
	if s := r.Sums(); s["bifrost_h_count"][""] != 6 || s["bifrost_h_sum"][""] != 18 {
		t.Errorf("Sums: count %v sum %v, want 6 and 18", s["bifrost_h_count"], s["bifrost_h_sum"])
	}
}
