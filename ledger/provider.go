package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpunex/gpunex/protocol"
)

// ProviderStore keeps what a provider sells and announces: its prices (provider/price/),
// its offer sequence (provider/offer-seq), its availability and maintenance
// (provider/availability, provider/maintenance) and its latest benchmark attestation
// (provider/attestation).
type ProviderStore struct{ *kv }

const (
	keyOfferSeq = "provider/offer-seq"
	prefixPrice = "provider/price/"
)

// SetPrice records the provider's price for a GPU model.
func (s *ProviderStore) SetPrice(model string, price protocol.MicroUSDC) error {
	if price <= 0 {
		return fmt.Errorf("price must be positive, got %s USDC", price)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(price))
	return s.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte(prefixPrice+protocol.NormalizeModel(model)), b[:])
	})
}

// Prices returns every price the provider has set, by normalised model.
func (s *ProviderStore) Prices() (map[string]protocol.MicroUSDC, error) {
	out := map[string]protocol.MicroUSDC{}
	err := s.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixPrice, func(key string, val []byte) error {
			if len(val) != 8 {
				return fmt.Errorf("ledger: price %s: corrupt value", key)
			}
			out[key] = protocol.MicroUSDC(binary.BigEndian.Uint64(val))
			return nil
		})
	})
	return out, err
}

// NextOfferSeq reserves the next offer sequence number, durably, before it is used: a
// crash can skip numbers but never hands out the same one twice. Sequences follow the
// clock (milliseconds) where they can, so a node whose ledger was lost still moves forward.
func (s *ProviderStore) NextOfferSeq(now time.Time) (uint64, error) {
	return s.nextSeq(keyOfferSeq, now)
}

const keyOwnAttestation = "provider/attestation"

// SetOwnAttestation stores the provider's latest benchmark attestation.
func (s *ProviderStore) SetOwnAttestation(raw []byte) error {
	return s.db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(keyOwnAttestation), raw) })
}

// OwnAttestation returns the provider's latest benchmark attestation, or ErrNotFound.
func (s *ProviderStore) OwnAttestation() ([]byte, error) { return s.getRaw(keyOwnAttestation) }

const keyMaintenance = "provider/maintenance"

// Maintenance is a provider's planned maintenance: one window, or a recurring rule.
type Maintenance struct {
	ID   string    `json:"id"`
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	Rule string    `json:"rule,omitempty"` // e.g. "first sunday 02:00 2h Europe/Paris"
	Note string    `json:"note,omitempty"`
}

// MaintenanceList returns the provider's planned maintenance.
func (s *ProviderStore) MaintenanceList() ([]Maintenance, error) {
	var out []Maintenance
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, keyMaintenance, &out) })
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return out, err
}

// SetMaintenance replaces the provider's planned maintenance.
func (s *ProviderStore) SetMaintenance(ms []Maintenance) error {
	return s.db.Update(func(txn *badger.Txn) error { return putJSON(txn, keyMaintenance, ms) })
}

const keyAvailability = "provider/availability"

// Availability is the weekly availability a provider set while running (`gpunex
// availability set|import`). It replaces [provider.availability] of the config until it is
// reset.
type Availability struct {
	Timezone string   `json:"timezone"`
	Windows  []string `json:"windows,omitempty"` // none: 24/7
	// Source is the iCalendar file or URL it was imported from, Follow how often the node
	// reads a URL source again (0: never).
	Source string        `json:"source,omitempty"`
	Follow time.Duration `json:"follow,omitempty"`
	SetAt  time.Time     `json:"set_at"`
	// Checked is when the node last read Source, Error why that read failed ("" if it did
	// not): the schedule then stays as it was.
	Checked time.Time `json:"checked,omitzero"`
	Error   string    `json:"error,omitempty"`
}

// Availability returns the availability set while running, or nil if none is.
func (s *ProviderStore) Availability() (*Availability, error) {
	var a Availability
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, keyAvailability, &a) })
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// SetAvailability records the availability set while running; nil goes back to the config's.
func (s *ProviderStore) SetAvailability(a *Availability) error {
	return s.db.Update(func(txn *badger.Txn) error {
		if a == nil {
			return txn.Delete([]byte(keyAvailability))
		}
		return putJSON(txn, keyAvailability, a)
	})
}
