package onboarding

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// The queue's index: what submissions, status requests, Certified and the coordinator's
// loops need to know of every application (its provider, status, sequence, network), held
// in memory, built from the ledger at start and kept up to date by each write, so that
// none of them reads the whole queue. The ledger stays the record: everything else is read
// from it, one application at a time.

// queueEntry is what the index holds of one application.
type queueEntry struct {
	id, provider, status string
	seq                  uint64
	network              string    // where it came from ("": loopback, or no connection)
	updatedAt            time.Time // when it last changed (for a closed one: when it closed)
	superseded           bool      // rejected because a newer application replaced it
}

func (e *queueEntry) open() bool { return isOpen(e.status) }

// providerSummary is what the index derives of one provider's applications.
type providerSummary struct {
	maxSeq uint64
	// latest is the application with the highest sequence; approved, the approved one
	// with the highest sequence ("" when none).
	latest, approved string
	open             []string // its open applications (one, except in queues from before)
	approvedIDs      []string
	latestRevoked    bool
}

// certified says whether the coordinator approved the provider and has not revoked it since.
func (s providerSummary) certified() bool { return s.approved != "" && !s.latestRevoked }

type queueIndex struct {
	mu        sync.RWMutex
	apps      map[string]*queueEntry
	providers map[string][]string // provider -> its application IDs
	summaries map[string]providerSummary
	open      int
	openByNet map[string]int
}

// newQueueIndex builds the index of the queue in l.
func newQueueIndex(l *ledger.ApplicationStore) (*queueIndex, error) {
	q := &queueIndex{apps: map[string]*queueEntry{}, providers: map[string][]string{},
		summaries: map[string]providerSummary{}, openByNet: map[string]int{}}
	apps, err := l.Applications()
	if err != nil {
		return nil, err
	}
	nets, err := l.ApplicationNetworks()
	if err != nil {
		return nil, err
	}
	for _, a := range apps {
		q.put(a, nets[a.ID])
	}
	return q, nil
}

func superseded(a ledger.Application) bool {
	return a.Status == protocol.StatusRejected && len(a.Events) > 0 && a.Events[len(a.Events)-1].Action == "superseded"
}

// put records an application as stored; network is where a new one came from (an update
// keeps the network held).
func (q *queueIndex) put(a ledger.Application, network string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	old := q.apps[a.ID]
	if old != nil {
		network = old.network
		q.count(old, -1)
	} else {
		q.providers[a.Provider] = append(q.providers[a.Provider], a.ID)
	}
	e := &queueEntry{id: a.ID, provider: a.Provider, status: a.Status, seq: a.Seq, network: network,
		updatedAt: a.UpdatedAt, superseded: superseded(a)}
	q.apps[a.ID] = e
	q.count(e, +1)
	q.summarise(a.Provider)
}

// remove forgets applications (pruned from the ledger).
func (q *queueIndex) remove(ids []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range ids {
		e := q.apps[id]
		if e == nil {
			continue
		}
		q.count(e, -1)
		delete(q.apps, id)
		q.providers[e.provider] = slices.DeleteFunc(q.providers[e.provider], func(x string) bool { return x == id })
		if len(q.providers[e.provider]) == 0 {
			// Its records are older than the retention, longer than an application's age:
			// none can be replayed, so nothing of the provider needs keeping.
			delete(q.providers, e.provider)
			delete(q.summaries, e.provider)
		} else {
			q.summarise(e.provider)
		}
	}
}

func (q *queueIndex) count(e *queueEntry, n int) {
	if !e.open() {
		return
	}
	q.open += n
	if e.network != "" {
		q.openByNet[e.network] += n
		if q.openByNet[e.network] == 0 {
			delete(q.openByNet, e.network)
		}
	}
}

func (q *queueIndex) summarise(provider string) {
	var s providerSummary
	var latestSeq, approvedSeq uint64
	for _, id := range q.providers[provider] {
		e := q.apps[id]
		s.maxSeq = max(s.maxSeq, e.seq)
		if s.latest == "" || e.seq > latestSeq {
			s.latest, latestSeq, s.latestRevoked = id, e.seq, e.status == protocol.StatusRevoked
		}
		switch {
		case e.open():
			s.open = append(s.open, id)
		case e.status == protocol.StatusApproved:
			s.approvedIDs = append(s.approvedIDs, id)
			if s.approved == "" || e.seq > approvedSeq {
				s.approved, approvedSeq = id, e.seq
			}
		}
	}
	q.summaries[provider] = s
}

// provider returns what the index knows of a provider's applications.
func (q *queueIndex) provider(p string) providerSummary {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.summaries[p]
}

// openCount returns how many applications are open in all, and how many came from network.
func (q *queueIndex) openCount(network string) (all, fromNetwork int) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.open, q.openByNet[network]
}

// networkOf returns the network an application came from.
func (q *queueIndex) networkOf(id string) string {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if e := q.apps[id]; e != nil {
		return e.network
	}
	return ""
}

// openIDs lists the open applications.
func (q *queueIndex) openIDs() []string {
	q.mu.RLock()
	defer q.mu.RUnlock()
	var out []string
	for id, e := range q.apps {
		if e.open() {
			out = append(out, id)
		}
	}
	return out
}

// latestApproved lists each provider's latest approved application.
func (q *queueIndex) latestApproved() []string {
	q.mu.RLock()
	defer q.mu.RUnlock()
	var out []string
	for _, s := range q.summaries {
		if s.approved != "" {
			out = append(out, s.approved)
		}
	}
	return out
}

// closedBefore lists the rejected applications past their retention at now: superseded
// ones closed supersededFor ago, those a reviewer rejected rejectedFor ago.
func (q *queueIndex) closedBefore(now time.Time, supersededFor, rejectedFor time.Duration) []string {
	q.mu.RLock()
	defer q.mu.RUnlock()
	var out []string
	for id, e := range q.apps {
		keep := rejectedFor
		if e.superseded {
			keep = supersededFor
		}
		if e.status == protocol.StatusRejected && now.Sub(e.updatedAt) >= keep {
			out = append(out, id)
		}
	}
	return out
}

// put stores a new application from a network and indexes it.
func (c *Coordinator) put(a ledger.Application, network string) error {
	if err := c.applications.PutApplicationFrom(a, network); err != nil {
		return err
	}
	c.queue.put(a, network)
	return nil
}

// update changes an application in the ledger and its index.
func (c *Coordinator) update(id string, f func(a *ledger.Application) error) (ledger.Application, error) {
	a, err := c.applications.UpdateApplication(id, f)
	if err == nil {
		c.queue.put(a, "")
	}
	return a, err
}

// room says whether the queue takes a new application from a network, which replaces the
// provider's open ones (replaced), and if so takes its share of the hour's intake. A
// replacement takes no new place in the queue, so only the network's count may refuse it.
func (c *Coordinator) room(replaced []string, network string, now time.Time) error {
	all, fromNetwork := c.queue.openCount(network)
	if len(replaced) == 0 && all >= MaxOpenApplications {
		return &queueBusy{"queue_full", fmt.Sprintf("the review queue is full (%d open applications): try again in a day", all)}
	}
	if network == "" {
		return nil
	}
	for _, id := range replaced {
		if c.queue.networkOf(id) == network {
			fromNetwork--
		}
	}
	if fromNetwork >= MaxOpenPerNetwork {
		return &queueBusy{"network_full", fmt.Sprintf("%d applications from your network (%s) are already waiting for a review: try again once they are decided", fromNetwork, network)}
	}
	if len(replaced) == 0 && !c.intake.Take("", now, 1) {
		return &queueBusy{"intake_full", fmt.Sprintf("the review queue takes at most %d new applications an hour and has taken them: try again within the hour", NewApplicationsPerHour)}
	}
	return nil
}

// queueBusy is a refusal for want of room, not for what the application says: the queue
// is full, the applicant's network holds its share of it, or the hour's intake is taken.
// It wraps no rejection reason (its label is "other"), so the applicant's node keeps the
// application and tries again later.
type queueBusy struct{ label, msg string }

func (e *queueBusy) Error() string { return e.msg }

// Prune deletes the rejected applications whose retention has passed at now
// (SupersededKeptFor, RejectedKeptFor), with their audit trails, and returns how many.
func (c *Coordinator) Prune(now time.Time) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.queue.closedBefore(now, SupersededKeptFor, RejectedKeptFor)
	if len(ids) == 0 {
		return 0, nil
	}
	if err := c.applications.DeleteApplications(ids); err != nil {
		return 0, err
	}
	c.queue.remove(ids)
	c.log.Info("closed applications deleted after their retention", "count", len(ids))
	return len(ids), nil
}

// applicantNetwork names the network an applicant's connection comes from, for the caps on
// open applications and submissions: an IPv4 address, an IPv6 /48 (what one site is given,
// so that a host cannot take more places by moving between the /64s it holds), "relayed
// via <the relay's network>" for a relayed connection, or "" for loopback (the operator's
// own processes: a devnet, a test), which no cap counts.
func applicantNetwork(a ma.Multiaddr) string {
	if a == nil {
		return ""
	}
	relayed := ""
	if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err == nil {
		relayed = "relayed via "
	}
	ip, err := manet.ToIP(a)
	if err != nil {
		return relayed + a.String()
	}
	if ip.IsLoopback() && relayed == "" {
		return ""
	}
	if v4 := ip.To4(); v4 != nil {
		return relayed + v4.String()
	}
	return relayed + ip.Mask(net.CIDRMask(48, 128)).String() + "/48"
}

// mailName is an applicant's name as an e-mail greets it: one line, at most mailNameRunes
// characters.
func mailName(name string) string {
	// Line breaks, other control and format characters (a right-to-left override) and runs
	// of spaces become one space.
	name = strings.Join(strings.FieldsFunc(name, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	}), " ")
	if r := []rune(name); len(r) > mailNameRunes {
		name = strings.TrimSpace(string(r[:mailNameRunes-1])) + "…"
	}
	if name == "" {
		return "applicant"
	}
	return name
}

const mailNameRunes = 60
