// Package ledger is the node's durable book, kept in badger v4: one database, reached
// through one narrow store per subsystem's tables (JobStore, EscrowStore, PayoutStore, ...),
// each holding the keys that subsystem owns. Every accessor is typed; no caller sees badger.
package ledger

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// Options configure Open.
type Options struct {
	// Dir is the data directory. Ignored when InMemory is set.
	Dir string
	// InMemory keeps everything in memory (tests).
	InMemory bool
	// Small shrinks badger's tables and drops its caches: for a scale harness that runs a
	// thousand nodes in one process, each with a few megabytes of records. With InMemory,
	// a value may then be 144 KiB at most (an offer is at most 128 KiB).
	Small  bool
	Logger *slog.Logger
}

// Ledger is the node's durable book: one badger database and its stores, each a view onto
// the tables of one subsystem. The node hands each subsystem only the stores it may use
// (node/deps_test.go checks it). It is safe for concurrent use.
type Ledger struct {
	kv *kv

	Jobs          *JobStore          // jobs this node rents or runs
	Escrow        *EscrowStore       // coordinator: accounts, deposits, holds, job reports, disputes, abandoned jobs
	Payouts       *PayoutStore       // coordinator: earnings, payout settings, batches, scheduled runs
	Wallet        *WalletStore       // the node's own deposits and payout settings
	Applications  *ApplicationStore  // coordinator: the application queue
	Applicant     *ApplicantStore    // provider: its own application and certificate
	Notifications *NotificationStore // notices for the operator
	Serials       *SerialStore       // named counters of signed records
	Offers        *OfferStore        // offers seen from others, revocations known
	Provider      *ProviderStore     // provider: prices, offer sequence, availability, maintenance, attestation
	Links         *LinkStore         // coordinator: providers' link measurements
	Reliability   *ReliabilityStore  // coordinator: providers' reliability states
	Models        *ModelStore        // coordinators' model catalogues
	History       *HistoryStore      // provider: its history for the dashboard's charts
	Alerts        *AlertStore        // which of the operator's alerts are firing
}

// ErrNotFound is returned when a record is absent.
var ErrNotFound = errors.New("not found")

// Open opens (or creates) the ledger with options sized for a small daemon.
func Open(o Options) (*Ledger, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	bo := badger.DefaultOptions(o.Dir).
		WithInMemory(o.InMemory).
		WithSyncWrites(!o.InMemory).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithValueLogFileSize(64 << 20).
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(8 << 20).
		WithNumCompactors(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(1 << 20).
		WithValueThreshold(1 << 10).
		WithMetricsEnabled(false).
		WithLogger(badgerLogger{log})
	if o.InMemory {
		// Without a value log every value stays in the LSM tree.
		bo.Dir, bo.ValueDir = "", ""
		bo = bo.WithValueThreshold(1 << 20)
	}
	if o.Small {
		// A batch (15% of a memtable) must hold the largest value.
		bo = bo.WithMemTableSize(1 << 20).WithNumMemtables(1).WithBlockCacheSize(0).WithIndexCacheSize(0).
			WithBaseTableSize(512 << 10).WithValueThreshold(min(bo.ValueThreshold, 144<<10)).
			WithCompression(options.None) // without a block cache, blocks are not compressed
	}
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("open ledger in %s: %w", o.Dir, err)
	}
	l := newLedger(db)
	if err := l.Escrow.buildRenterIndex(); err != nil {
		db.Close()
		return nil, fmt.Errorf("index renters' holds and deposits: %w", err)
	}
	return l, nil
}

// newLedger gives every store the same database.
func newLedger(db *badger.DB) *Ledger {
	k := &kv{db: db}
	return &Ledger{kv: k,
		Jobs: &JobStore{k}, Escrow: &EscrowStore{k}, Payouts: &PayoutStore{k}, Wallet: &WalletStore{k},
		Applications: &ApplicationStore{k}, Applicant: &ApplicantStore{k}, Notifications: &NotificationStore{k},
		Serials: &SerialStore{k}, Offers: &OfferStore{k}, Provider: &ProviderStore{k}, Links: &LinkStore{k},
		Reliability: &ReliabilityStore{k}, Models: &ModelStore{k}, History: &HistoryStore{k}, Alerts: &AlertStore{k},
	}
}

// Close flushes and closes the ledger.
func (l *Ledger) Close() error { return l.kv.db.Close() }

// badgerLogger routes badger's messages to slog; its info chatter goes to debug.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)), "subsystem", "badger")
}

func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)), "subsystem", "badger")
}

func (b badgerLogger) Infof(f string, a ...any) {
	b.l.Debug(strings.TrimSpace(fmt.Sprintf(f, a...)), "subsystem", "badger")
}

func (b badgerLogger) Debugf(f string, a ...any) {
	b.l.Debug(strings.TrimSpace(fmt.Sprintf(f, a...)), "subsystem", "badger")
}
