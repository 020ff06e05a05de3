package devnet

import (
	"reflect"
	"testing"
	"time"
)

// TestSoakSchedule: a seed gives one schedule (a failing soak is replayed with its seed),
// every fault lies within the run, 5 s or more after the one before, and the 3-minute soak
// of `make test` (seed 1) applies every kind of fault.
func TestSoakSchedule(t *testing.T) {
	o := SoakOptions{Duration: 3 * time.Minute, Seed: 1, FaultEvery: 20 * time.Second, MaxDown: 15 * time.Second}
	nodes := []string{"coordinator", "provider-1", "renter-1"}
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
		if f.At < last+5*time.Second || f.At >= 3*time.Minute || f.For < 2*time.Second || f.For > 15*time.Second {
			t.Errorf("fault out of bounds: %s", f)
		}
		if (f.Kind == FaultKill || f.Kind == FaultDisk) != (f.Target != "") || f.Kind == FaultDisk && f.Target != "provider-1" {
			t.Errorf("a kill names its node, a full disk its provider, nothing else names one: %s", f)
		}
		last = f.At
		kinds[f.Kind]++
	}
	for _, k := range []string{FaultKill, FaultRPCSlow, FaultRPCFail, FaultRPCDrop, FaultDisk} {
		if kinds[k] == 0 {
			t.Errorf("seed 1 over 3 minutes never applies %q: %v", k, a)
		}
	}
}
