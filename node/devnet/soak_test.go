package devnet

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestSoakSchedule: a seed gives one schedule (a failing soak is replayed with its seed),
// every fault lies within the run, 5 s or more after the one before, and the 3-minute soak
// of `make test` (seed 1) applies every kind of fault.
func TestSoakSchedule(t *testing.T) {
	o := SoakOptions{Duration: 3 * time.Minute, Seed: 1, FaultEvery: 20 * time.Second, MaxDown: 15 * time.Second}
	nodes := []string{"coordinator", "provider-1", "provider-2", "renter-1"}
	a, b := drawSchedule(o, nodes), drawSchedule(o, nodes)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("one seed drew two schedules")
	}
	o.Seed = 2
	if reflect.DeepEqual(a, drawSchedule(o, nodes)) {
		t.Fatal("two seeds drew one schedule")
	}
	kinds := map[string]int{}
	last := time.Duration(0)
	for _, f := range a {
		longest := 15 * time.Second
		switch f.Kind {
		case FaultPartition:
			longest *= 2
		case FaultClock:
			longest *= 4
			if f.Offset == 0 || f.Offset < -maxSkew || f.Offset > maxSkew || f.Offset%time.Minute != 0 {
				t.Errorf("a clock skew moves a clock by whole minutes, 1 to 5 either way: %s", f)
			}
		}
		if f.At < last+5*time.Second || f.At >= 3*time.Minute || f.For < 2*time.Second || f.For > longest {
			t.Errorf("fault out of bounds: %s", f)
		}
		if (f.Kind == FaultKill || f.Kind == FaultDisk || f.Kind == FaultPartition || f.Kind == FaultClock) != (f.Target != "") ||
			f.Kind == FaultDisk && !strings.HasPrefix(f.Target, "provider-") {
			t.Errorf("a kill and a clock skew name their node, a full disk its provider, a partition its two nodes, nothing else names one: %s", f)
		}
		if f.Kind == FaultPartition && !partitionPairs[[2]string{nodeRole(f.Target), nodeRole(f.Peer)}] {
			t.Errorf("a partition cuts a provider or a renter from the coordinator, or a renter from a provider: %s", f)
		}
		last = f.At
		kinds[f.Kind]++
	}
	for _, k := range FaultKinds {
		if kinds[k] == 0 {
			t.Errorf("seed 1 over 3 minutes never applies %q: %v", k, a)
		}
	}
}

var partitionPairs = map[[2]string]bool{{"provider", "coordinator"}: true, {"renter", "provider"}: true, {"renter", "coordinator"}: true}

func nodeRole(name string) string { return strings.TrimRight(name, "-0123456789") }
