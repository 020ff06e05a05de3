package ledger

import (
	"errors"
	"testing"
	"time"
)

// TestApplicationNetworksKept: the network an application came from survives a restart with
// it; an ID is taken once; deleting applications removes them and their networks, and
// leaves the others.
func TestApplicationNetworksKept(t *testing.T) {
	dir := t.TempDir()
	l := openTemp(t, dir)
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	p := newPeer(t).String()
	for _, x := range []struct{ id, network string }{{"0123456789ab", "198.51.100.7"}, {"0123456789ac", "2001:db8:aa::/48"}, {"0123456789ad", ""}} {
		if err := l.Applications.PutApplicationFrom(Application{ID: x.id, Provider: p, Status: "pending", SubmittedAt: now}, x.network); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Applications.PutApplicationFrom(Application{ID: "0123456789ab", Provider: p}, "203.0.113.1"); err == nil {
		t.Fatal("an application ID taken twice")
	}
	l.Close()
	l = openTemp(t, dir)
	defer l.Close()
	nets, err := l.Applications.ApplicationNetworks()
	if err != nil || len(nets) != 2 || nets["0123456789ab"] != "198.51.100.7" || nets["0123456789ac"] != "2001:db8:aa::/48" {
		t.Fatalf("networks after a restart: %v %v", nets, err)
	}
	if err := l.Applications.DeleteApplications([]string{"0123456789ab", "0123456789ad"}); err != nil {
		t.Fatal(err)
	}
	apps, _ := l.Applications.Applications()
	nets, _ = l.Applications.ApplicationNetworks()
	if len(apps) != 1 || apps[0].ID != "0123456789ac" || len(nets) != 1 {
		t.Fatalf("after deleting two: %d applications, networks %v", len(apps), nets)
	}
	if _, err := l.Applications.GetApplication("0123456789ab"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a deleted application: %v", err)
	}
}
