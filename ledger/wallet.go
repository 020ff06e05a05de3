package ledger

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpunex/gpunex/protocol"
)

// WalletStore keeps a node's own side of the money: the deposits it sent
// (wallet/deposit/), and a provider's payout settings chosen from its dashboard
// (provider/payout-settings) with their sequence.
type WalletStore struct{ *kv }

// NextPayoutSettingsSeq returns the sequence for a provider's next payout settings.
func (s *WalletStore) NextPayoutSettingsSeq(now time.Time) (uint64, error) {
	return s.nextSeq("provider/payout-settings-seq", now)
}

const keyOwnPayoutSettings = "provider/payout-settings"

// SetOwnPayoutSettings keeps the payout settings a provider chose from its dashboard, which
// replace [payout] of its config.toml; nil removes them, and config.toml is in force again.
func (s *WalletStore) SetOwnPayoutSettings(settings *protocol.PayoutSettings) error {
	return s.db.Update(func(txn *badger.Txn) error {
		if settings == nil {
			return txn.Delete([]byte(keyOwnPayoutSettings))
		}
		return putJSON(txn, keyOwnPayoutSettings, settings)
	})
}

// OwnPayoutSettings returns the settings SetOwnPayoutSettings kept, or ErrNotFound.
func (s *WalletStore) OwnPayoutSettings() (*protocol.PayoutSettings, error) {
	raw, err := s.getRaw(keyOwnPayoutSettings)
	if err != nil {
		return nil, err
	}
	var settings protocol.PayoutSettings
	if err := json.Unmarshal(raw, &settings); err != nil {
		return nil, fmt.Errorf("ledger: own payout settings: %w", err)
	}
	return &settings, nil
}

const keyPendingPayout = "provider/payout-pending"

// PayoutChange is a change of a provider's payout settings asked for from a dashboard
// session, waiting for [payout] change_delay before it applies: new settings, or Remove
// (back to config.toml's).
type PayoutChange struct {
	Settings    *protocol.PayoutSettings `json:"settings,omitempty"`
	Remove      bool                     `json:"remove,omitempty"`
	RequestedAt time.Time                `json:"requested_at"`
	ApplyAt     time.Time                `json:"apply_at"`
}

// SetPendingPayout keeps the payout change waiting to apply; nil forgets it.
func (s *WalletStore) SetPendingPayout(p *PayoutChange) error {
	return s.db.Update(func(txn *badger.Txn) error {
		if p == nil {
			return txn.Delete([]byte(keyPendingPayout))
		}
		return putJSON(txn, keyPendingPayout, p)
	})
}

// PendingPayoutChange returns the payout change waiting to apply, or ErrNotFound.
func (s *WalletStore) PendingPayoutChange() (PayoutChange, error) {
	var p PayoutChange
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, keyPendingPayout, &p) })
	return p, err
}

const prefixOwnDeposit = "wallet/deposit/"

// OwnDeposit is a deposit this node sent, recorded before it is sent so that a crash
// between sending and claiming loses nothing: the claim is retried.
type OwnDeposit struct {
	Signature string             `json:"signature"`
	Amount    protocol.MicroUSDC `json:"amount"`
	Raw       []byte             `json:"raw,omitempty"`
	LastValid uint64             `json:"last_valid_block_height"`
	SentAt    time.Time          `json:"sent_at"`
	Claimed   bool               `json:"claimed"`
	Error     string             `json:"error,omitempty"`
	// Coordinator is the peer ID of the coordinator whose treasury it was sent to (empty in
	// deposits recorded before it was kept: the home coordinator's).
	Coordinator string `json:"coordinator,omitempty"`
}

// OwnDeposit returns one of this node's deposits by its transaction signature.
func (s *WalletStore) OwnDeposit(signature string) (OwnDeposit, error) {
	var d OwnDeposit
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixOwnDeposit+signature, &d) })
	return d, err
}

// PutOwnDeposit stores a deposit's state.
func (s *WalletStore) PutOwnDeposit(d OwnDeposit) error {
	return s.db.Update(func(txn *badger.Txn) error { return putJSON(txn, prefixOwnDeposit+d.Signature, d) })
}

// OwnDeposits returns this node's deposits, oldest first.
func (s *WalletStore) OwnDeposits() ([]OwnDeposit, error) {
	out, err := scanAll[OwnDeposit](s.kv, prefixOwnDeposit, nil)
	sort.Slice(out, func(i, k int) bool { return out[i].SentAt.Before(out[k].SentAt) })
	return out, err
}
