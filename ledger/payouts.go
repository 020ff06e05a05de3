package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpunex/gpunex/protocol"
)

// PayoutStore keeps what the coordinator owes providers and pays them: their earnings
// (money/earning/, written by EscrowStore's charges), their latest payout settings
// (money/settings/), the payout batches and their counter per day (money/batch/,
// money/batch-day/) and the scheduled runs done (money/scheduled-run/).
type PayoutStore struct{ *kv }

const (
	prefixEarning  = "money/earning/" // + provider + "/" + receipt SHA-256
	prefixSettings = "money/settings/"
	prefixBatch    = "money/batch/"
	prefixBatchDay = "money/batch-day/"
)

// PayoutSettings is a provider's latest signed payout settings.
type PayoutSettings struct {
	protocol.PayoutSettings
	Raw []byte `json:"raw"`
}

func earningKey(provider, receipt string) string { return prefixEarning + provider + "/" + receipt }

// GetEarning returns a provider's earning from one receipt, or ErrNotFound.
func (s *PayoutStore) GetEarning(provider, receipt string) (Earning, error) {
	var e Earning
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, earningKey(provider, receipt), &e) })
	return e, err
}

// Earnings returns a provider's earnings ("" for all), oldest first.
func (s *PayoutStore) Earnings(provider string) ([]Earning, error) {
	prefix := prefixEarning
	if provider != "" {
		prefix += provider + "/"
	}
	out, err := scanAll[Earning](s.kv, prefix, nil)
	sort.Slice(out, func(i, k int) bool { return out[i].EndedAt.Before(out[k].EndedAt) })
	return out, err
}

// PutPayoutSettings stores a provider's signed payout settings unless a newer sequence is
// stored already; it reports whether it replaced them.
func (s *PayoutStore) PutPayoutSettings(settings PayoutSettings) (bool, error) {
	stored := false
	err := s.update(func(txn *badger.Txn) error {
		stored = false
		var cur PayoutSettings
		if err := getJSON(txn, prefixSettings+settings.Provider, &cur); err == nil && cur.Seq >= settings.Seq {
			return nil
		} else if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		stored = true
		return putJSON(txn, prefixSettings+settings.Provider, settings)
	})
	return stored, err
}

// GetPayoutSettings returns a provider's payout settings, or ErrNotFound.
func (s *PayoutStore) GetPayoutSettings(provider string) (PayoutSettings, error) {
	var settings PayoutSettings
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixSettings+provider, &settings) })
	return settings, err
}

// Transaction states of the payout state machine (docs/settlement.md).
const (
	TxPlanned   = "planned"   // not signed yet
	TxSigned    = "signed"    // signed, signature and bytes recorded, maybe sent
	TxConfirmed = "confirmed" // found on chain, confirmed
)

// BatchTx is one Solana transaction of a payout batch.
type BatchTx struct {
	Payouts   []int  `json:"payouts"` // indexes into Batch.Payouts
	State     string `json:"state"`
	Signature string `json:"signature,omitempty"`
	Raw       []byte `json:"raw,omitempty"`
	// LastValid is the last block height at which the signed transaction can land.
	LastValid uint64 `json:"last_valid_block_height,omitempty"`
	Attempts  int    `json:"attempts"`
	// Slot is the slot its latest signature's blockhash was read at: it cannot have
	// landed before. Failures counts its failures on chain.
	Slot     uint64 `json:"slot,omitempty"`
	Failures int    `json:"failures,omitempty"`
	Fee      uint64 `json:"fee_lamports,omitempty"`
	// CreateATA lists the payouts whose token account the transaction creates.
	CreateATA []int `json:"create_ata,omitempty"`
}

// Batch is a payout batch as the coordinator settles it.
type Batch struct {
	protocol.PayoutBatch
	CreatedAt time.Time `json:"created_at"`
	Error     string    `json:"error,omitempty"`
	Txs       []BatchTx `json:"txs,omitempty"`
	// Record is the latest signed PayoutBatch envelope.
	Record []byte `json:"record,omitempty"`
	// Settings are the providers' signed payout settings the batch relied on.
	Settings map[string][]byte `json:"settings,omitempty"`
	// Marking is set while the batch's receipts are being marked as taken by it (in
	// chunks: a batch may pay more receipts than one ledger transaction holds).
	Marking bool `json:"marking,omitempty"`
	// Deferred are the payouts taken out of the batch before any transaction paying them
	// was signed: their receipts wait for the next batch.
	Deferred []DeferredPayout `json:"deferred,omitempty"`
	DryRun   bool             `json:"-"`
}

// DeferredPayout is a payout moved out of a batch, and why.
type DeferredPayout struct {
	Provider string             `json:"provider"`
	Amount   protocol.MicroUSDC `json:"amount"`
	Receipts []string           `json:"receipts"`
	Reason   string             `json:"reason"`
	At       time.Time          `json:"at"`
}

// DeferPayouts stores a batch from which payouts were taken out, and gives their receipts
// back to the pending earnings, in one ledger transaction: no receipt is ever both in a
// batch and pending.
func (s *PayoutStore) DeferPayouts(b Batch, deferred []DeferredPayout) error {
	return s.db.Update(func(txn *badger.Txn) error {
		for _, d := range deferred {
			for _, r := range d.Receipts {
				key := earningKey(d.Provider, r)
				var e Earning
				if err := getJSON(txn, key, &e); err != nil {
					return fmt.Errorf("receipt %s of %s: %w", r, d.Provider, err)
				}
				if e.Batch != b.Batch {
					continue
				}
				e.Batch = ""
				if err := putJSON(txn, key, e); err != nil {
					return err
				}
			}
		}
		return putJSON(txn, prefixBatch+b.Batch, b)
	})
}

// BatchFailed is the state of a batch that could not take its receipts (one was in another
// batch already); it pays nothing.
const BatchFailed = "failed"

// markChunk is how many receipts one ledger transaction marks.
const markChunk = 500

// NextBatchID returns a new batch ID for the day: YYYYMMDD-NNN.
func (s *PayoutStore) NextBatchID(now time.Time) (string, error) {
	day := now.UTC().Format("20060102")
	var n int
	err := s.update(func(txn *badger.Txn) error {
		n = 0
		if err := getJSON(txn, prefixBatchDay+day, &n); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		n++
		return putJSON(txn, prefixBatchDay+day, n)
	})
	return fmt.Sprintf("%s-%03d", day, n), err
}

// CreateBatch stores a new batch, then marks each receipt it pays as taken by it, in
// chunks, so that no other batch pays it. A crash in between leaves the batch marked
// Marking: FinishMarking completes it before anything is planned or sent.
func (s *PayoutStore) CreateBatch(b Batch) error {
	b.Marking = true
	err := s.db.Update(func(txn *badger.Txn) error {
		if _, err := txn.Get([]byte(prefixBatch + b.Batch)); err == nil {
			return fmt.Errorf("batch %s exists", b.Batch)
		}
		return putJSON(txn, prefixBatch+b.Batch, b)
	})
	if err != nil {
		return err
	}
	return s.markReceipts(b)
}

// markReceipts marks a batch's receipts as taken by it. A receipt in another batch fails the
// batch: its own marks are undone and it is stored as failed.
func (s *PayoutStore) markReceipts(b Batch) error {
	type item struct{ provider, receipt string }
	var all []item
	for _, p := range b.Payouts {
		for _, r := range p.Receipts {
			all = append(all, item{p.Provider, r})
		}
	}
	// setBatch moves every receipt whose batch is from to batch to, markChunk per ledger
	// transaction; a receipt in another batch sets conflict (and stops the marking).
	var conflict error
	setBatch := func(from, to string) error {
		for start := 0; start < len(all); start += markChunk {
			err := s.db.Update(func(txn *badger.Txn) error {
				for _, it := range all[start:min(start+markChunk, len(all))] {
					key := earningKey(it.provider, it.receipt)
					var e Earning
					if err := getJSON(txn, key, &e); err != nil {
						return fmt.Errorf("receipt %s of %s: %w", it.receipt, it.provider, err)
					}
					switch e.Batch {
					case to:
						continue
					case from:
						e.Batch = to
						if err := putJSON(txn, key, e); err != nil {
							return err
						}
					default:
						if conflict == nil {
							conflict = fmt.Errorf("receipt %s is already in batch %s", it.receipt, e.Batch)
						}
						if to != "" {
							return conflict
						}
					}
				}
				return nil
			})
			if err != nil && err != conflict {
				return err
			}
			if conflict != nil && to != "" {
				return nil
			}
		}
		return nil
	}
	if err := setBatch("", b.Batch); err != nil {
		return err
	}
	if conflict != nil {
		if err := setBatch(b.Batch, ""); err != nil {
			return err
		}
	}
	return s.db.Update(func(txn *badger.Txn) error {
		var cur Batch
		if err := getJSON(txn, prefixBatch+b.Batch, &cur); err != nil {
			return err
		}
		cur.Marking = false
		if conflict != nil {
			cur.State, cur.Error = BatchFailed, conflict.Error()
			if err := putJSON(txn, prefixBatch+b.Batch, cur); err != nil {
				return err
			}
			return conflict
		}
		return putJSON(txn, prefixBatch+b.Batch, cur)
	})
}

// FinishMarking completes the marking of the batches a crash interrupted.
func (s *PayoutStore) FinishMarking() error {
	bs, err := s.Batches()
	if err != nil {
		return err
	}
	for _, b := range bs {
		if b.Marking {
			if err := s.markReceipts(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// PutBatch stores a batch's new state.
func (s *PayoutStore) PutBatch(b Batch) error {
	return s.db.Update(func(txn *badger.Txn) error { return putJSON(txn, prefixBatch+b.Batch, b) })
}

// GetBatch returns a batch, or ErrNotFound.
func (s *PayoutStore) GetBatch(id string) (Batch, error) {
	var b Batch
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixBatch+id, &b) })
	return b, err
}

// Batches returns every batch, newest first.
func (s *PayoutStore) Batches() ([]Batch, error) {
	out, err := scanAll[Batch](s.kv, prefixBatch, nil)
	sort.Slice(out, func(i, k int) bool { return out[i].Batch > out[k].Batch })
	return out, err
}

// BatchesBefore calls f with each batch whose ID sorts before before ("" for all), newest
// first, until f returns false: a page of batches reads only that page from the ledger.
func (s *PayoutStore) BatchesBefore(before string, f func(Batch) bool) error {
	return s.db.View(func(txn *badger.Txn) error {
		p := []byte(prefixBatch)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: p, Reverse: true, PrefetchValues: false})
		defer it.Close()
		seek := append(append([]byte{}, p...), 0xff)
		if before != "" {
			seek = []byte(prefixBatch + before)
		}
		for it.Seek(seek); it.ValidForPrefix(p); it.Next() {
			k := string(it.Item().Key())
			if before != "" && k >= prefixBatch+before {
				continue
			}
			var b Batch
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &b) }); err != nil {
				return fmt.Errorf("ledger: %s: %w", k, err)
			}
			if !f(b) {
				return nil
			}
		}
		return nil
	})
}

// PendingByProvider sums each provider's earnings not yet in a batch, with their receipts
// sorted.
func PendingByProvider(earnings []Earning) map[string]PendingPayout {
	out := map[string]PendingPayout{}
	for _, e := range earnings {
		if e.Batch != "" {
			continue
		}
		p := out[e.Provider]
		p.Amount += e.Net
		p.Receipts = append(p.Receipts, e.Receipt)
		out[e.Provider] = p
	}
	for k, p := range out {
		slices.Sort(p.Receipts)
		out[k] = p
	}
	return out
}

// PendingPayout is what a provider is owed and for which receipts.
type PendingPayout struct {
	Amount   protocol.MicroUSDC
	Receipts []string
}

// Signed reports whether the latest signed record lists every confirmed transaction.
func (b Batch) Signed() bool {
	n := 0
	for _, t := range b.Txs {
		if t.State == TxConfirmed {
			n++
		}
	}
	return len(b.Record) > 0 && n == len(b.Transactions)
}

// UnsettledUSDC reports whether a batch has Solana transactions not confirmed yet.
func (b Batch) UnsettledUSDC() bool {
	for _, t := range b.Txs {
		if t.State != TxConfirmed {
			return true
		}
	}
	return false
}

const prefixScheduledRun = "money/scheduled-run/"

// ScheduledPayoutDone reports whether the scheduled payouts of a key (schedule/YYYY-MM-DD) ran.
func (s *PayoutStore) ScheduledPayoutDone(day string) (bool, error) {
	var done bool
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixScheduledRun+day, &done) })
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return done, err
}

// MarkScheduledPayoutDone records that the scheduled payouts of a key ran.
func (s *PayoutStore) MarkScheduledPayoutDone(day string) error {
	return s.db.Update(func(txn *badger.Txn) error { return putJSON(txn, prefixScheduledRun+day, true) })
}
