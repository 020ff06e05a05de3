package alerts

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
)

// operatorHook is the operator's webhook: it fails while down, and keeps the states of the
// alerts it took.
type operatorHook struct {
	*httptest.Server
	down    atomic.Bool
	hold    chan struct{} // when set, each request waits for it to close
	arrived atomic.Int32
	mu      sync.Mutex
	states  []string
}

func startHook(t *testing.T) *operatorHook {
	h := &operatorHook{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.arrived.Add(1)
		if h.hold != nil {
			<-h.hold
		}
		if h.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var p struct {
			Event event `json:"event"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		h.mu.Lock()
		h.states = append(h.states, p.Event.State)
		h.mu.Unlock()
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *operatorHook) told() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.states...)
}

func testAlerter(t *testing.T, hookURL string) (*Alerter, *ledger.Ledger) {
	t.Helper()
	l, err := ledger.Open(ledger.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cfg := config.AlertsConfig{WebhookURL: hookURL}
	a, err := New(Deps{Alerts: l.Alerts, Clock: clock.System(), Log: slog.New(slog.DiscardHandler),
		Config: func() config.AlertsConfig { return cfg }, Node: "provider test"})
	if err != nil {
		t.Fatal(err)
	}
	return a, l
}

// checkAndWait runs one check and waits for its deliveries to end.
func checkAndWait(a *Alerter) {
	a.Check()
	a.wg.Wait()
}

// TestFailedAlertToldAgain: the operator's webhook is down when a condition starts, so the
// alert is not delivered; the next check tells it again, once, and the one after tells
// nothing new. When the condition ends, the same: the resolution is retried until delivered.
func TestFailedAlertToldAgain(t *testing.T) {
	hook := startHook(t)
	a, l := testAlerter(t, hook.URL)
	var diskFull atomic.Bool
	diskFull.Store(true)
	a.Watch(Condition{Key: "disk", Resolved: "the disk has room again", Check: func(time.Time) (bool, string, string, bool) {
		return diskFull.Load(), "the disk is filling up", "1 GB left", true
	}})

	hook.down.Store(true)
	checkAndWait(a)
	if told, _ := l.Alerts.AlertFiring("disk"); told || len(hook.told()) != 0 {
		t.Fatalf("recorded as told (%v) or delivered (%v) while the webhook was down", told, hook.told())
	}
	hook.down.Store(false)
	checkAndWait(a)
	if got := hook.told(); len(got) != 1 || got[0] != "firing" {
		t.Fatalf("after the webhook came back: %v, want one firing alert", got)
	}
	checkAndWait(a)
	if got := hook.told(); len(got) != 1 {
		t.Fatalf("told again although delivered: %v", got)
	}

	hook.down.Store(true)
	diskFull.Store(false)
	checkAndWait(a)
	if told, _ := l.Alerts.AlertFiring("disk"); !told {
		t.Fatal("the resolution was recorded although it was not delivered")
	}
	hook.down.Store(false)
	checkAndWait(a)
	checkAndWait(a)
	if got := hook.told(); len(got) != 2 || got[1] != "resolved" {
		t.Fatalf("the resolution: %v, want firing then one resolved", got)
	}
}

// TestAlertNotSentTwiceWhileInFlight: a check that runs while the previous check's message
// is still being delivered does not send it a second time.
func TestAlertNotSentTwiceWhileInFlight(t *testing.T) {
	hook := startHook(t)
	hook.hold = make(chan struct{})
	a, _ := testAlerter(t, hook.URL)
	a.Watch(Condition{Key: "score", Resolved: "score back", Check: func(time.Time) (bool, string, string, bool) {
		return true, "the score is low", "50", true
	}})
	a.Check()
	for deadline := time.Now().Add(10 * time.Second); hook.arrived.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	a.Check()
	a.Check()
	close(hook.hold)
	a.wg.Wait()
	if n := hook.arrived.Load(); n != 1 {
		t.Fatalf("%d deliveries of one alert", n)
	}
}
