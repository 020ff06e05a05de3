package ledger

import (
	"time"

	"github.com/dgraph-io/badger/v4"
)

// LinkStore keeps a coordinator's latest measurement of each provider's link
// (coordinator/link/).
type LinkStore struct{ *kv }

const prefixLink = "coordinator/link/"

// LinkMeasurement is a coordinator's own latest measurement of a provider's link (the
// figures of the last network receipt it signed for it).
type LinkMeasurement struct {
	Provider   string    `json:"provider"`
	MeasuredAt time.Time `json:"measured_at"`
	RTTMilli   float64   `json:"rtt_ms"`
	UpMbps     float64   `json:"up_mbps"`
	DownMbps   float64   `json:"down_mbps"`
	Bytes      int64     `json:"bytes"`
}

// SetLinkMeasurement keeps a provider's latest link measurement.
func (s *LinkStore) SetLinkMeasurement(m LinkMeasurement) error {
	return s.db.Update(func(txn *badger.Txn) error { return putJSON(txn, prefixLink+m.Provider, m) })
}

// LinkMeasurement returns a provider's latest link measurement, or ErrNotFound.
func (s *LinkStore) LinkMeasurement(provider string) (LinkMeasurement, error) {
	var m LinkMeasurement
	err := s.db.View(func(txn *badger.Txn) error { return getJSON(txn, prefixLink+provider, &m) })
	return m, err
}
