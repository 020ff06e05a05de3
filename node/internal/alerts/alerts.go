// Package alerts tells a node's operator, by e-mail, signed webhook or both ([alerts] in
// config.toml), what needs them: a GPU delisted, relisted or lost, the host delisted, the
// certificate expiring or revoked, the score under a level, a payout sent, the disk filling
// up. An event is told once, as it happens; a condition once when it starts and once when
// it ends, never again in between, even across restarts (the ledger keeps which states were
// told). A change the operator could not be told (the mail server or the webhook failed) is
// told again at the next check: the ledger records a state only once it was delivered.
// docs/operations.md, "Alerts".
package alerts

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
	"github.com/gpunex/gpunex/node/internal/clock"
	"github.com/gpunex/gpunex/node/internal/notify"
)

// CheckEvery is how often the conditions are checked. (Tests shorten it.)
var CheckEvery = 5 * time.Minute

// Condition is one state an operator is told about when it starts and when it ends.
type Condition struct {
	// Key names it in the ledger ("disk", "score", "certificate-expiring", ...).
	Key string
	// Check says whether it holds now, with the message when it does; ok false means it
	// could not be told (no data yet): the state stays as it is.
	Check func(now time.Time) (firing bool, subject, body string, ok bool)
	// Resolved is the subject of the message when it ends.
	Resolved string
}

// Deps are what an Alerter needs.
type Deps struct {
	Alerts *ledger.AlertStore
	Clock  clock.Clock
	Log    *slog.Logger
	// Config returns the [alerts] section (read at each check, so that it can change).
	Config func() config.AlertsConfig
	// Node names the node in every message ("provider 12D3KooW…").
	Node string
}

// Alerter sends the alerts of one node.
type Alerter struct {
	alerts *ledger.AlertStore
	clock  clock.Clock
	log    *slog.Logger
	cfg    func() config.AlertsConfig
	node   string
	out    *notify.Notices
	wg     sync.WaitGroup

	mu         sync.Mutex
	conditions []Condition
	// sending holds the conditions whose change is being delivered: a check meanwhile
	// does not send it a second time.
	sending map[string]bool
}

// New returns the alerter of a node; the channels' secret files are read now.
func New(d Deps) (*Alerter, error) {
	nc, err := notify.FromConfig(d.Config().Notify(), "alerts")
	if err != nil {
		return nil, err
	}
	return &Alerter{alerts: d.Alerts, clock: d.Clock, log: d.Log, cfg: d.Config, node: d.Node,
		out: notify.New(nc, d.Log.With("subsystem", "alerts"), d.Clock), sending: map[string]bool{}}, nil
}

// event is a webhook's JSON event.
type event struct {
	Node    string    `json:"node"`
	Alert   string    `json:"alert"`
	State   string    `json:"state"` // event, firing or resolved
	Subject string    `json:"subject"`
	At      time.Time `json:"at"`
}

// send delivers one message in the background (a slow mail server holds up nothing), then
// calls after (when not nil) with whether every channel took it.
func (a *Alerter) send(key, state, subject, body string, after func(delivered bool)) {
	cfg := a.cfg()
	if cfg.Email == "" && cfg.WebhookURL == "" {
		if after != nil {
			after(false)
		}
		return
	}
	n := notify.Notice{To: cfg.Email, Subject: "gpunex: " + subject, Body: fmt.Sprintf("%s\n\n%s\n\n-- \n%s", subject, body, a.node),
		Event: event{Node: a.node, Alert: key, State: state, Subject: subject, At: a.clock.Now().UTC()}}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := a.out.Send(ctx, n)
		if err != nil {
			a.log.Warn("alert not delivered: told again at the next check", "alert", key, "subject", subject, "err", err)
		}
		if after != nil {
			after(err == nil)
		}
	}()
}

// Event tells the operator of something that happened once (a GPU delisted, a payout
// sent): its source calls it once per occurrence.
func (a *Alerter) Event(key, subject, body string) {
	a.send(key, "event", subject, body, nil)
}

// Watch adds a condition to the checks.
func (a *Alerter) Watch(c Condition) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.conditions = append(a.conditions, c)
}

// Check checks every condition now, and tells the operator of those that started or ended
// since the last change told. The new state is recorded once the message is delivered, so a
// failed delivery is tried again at the next check; if both channels are set and only one
// failed, the next check sends on both again (told at least once, not exactly once).
func (a *Alerter) Check() {
	if cfg := a.cfg(); cfg.Email == "" && cfg.WebhookURL == "" {
		return // nobody to tell: nothing is checked (a payout check asks the coordinator)
	}
	now := a.clock.Now()
	a.mu.Lock()
	cs := append([]Condition(nil), a.conditions...)
	a.mu.Unlock()
	for _, c := range cs {
		firing, subject, body, ok := c.Check(now)
		if !ok {
			continue
		}
		told, err := a.alerts.AlertFiring(c.Key)
		if err != nil {
			a.log.Warn("alert state not read", "alert", c.Key, "err", err)
			continue
		}
		if firing == told || !a.startSending(c.Key) {
			continue
		}
		key := c.Key
		after := func(delivered bool) {
			if delivered {
				if _, err := a.alerts.SetAlertFiring(key, firing); err != nil {
					a.log.Warn("alert state not stored", "alert", key, "err", err)
				}
			}
			a.mu.Lock()
			delete(a.sending, key)
			a.mu.Unlock()
		}
		if firing {
			a.send(key, "firing", subject, body, after)
		} else {
			a.send(key, "resolved", c.Resolved, "Resolved: "+c.Resolved+".", after)
		}
	}
}

// startSending marks a condition's change as being delivered; false if it already is.
func (a *Alerter) startSending(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sending[key] {
		return false
	}
	a.sending[key] = true
	return true
}

// Loop checks the conditions every CheckEvery until ctx ends, then waits for the messages
// in flight.
func (a *Alerter) Loop(ctx context.Context) {
	defer a.wg.Wait()
	for {
		a.Check()
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(CheckEvery):
		}
	}
}
