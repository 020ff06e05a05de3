package ledger

import "time"

// SerialStore keeps the named counters the signers of several subsystems number their
// records with (serial/<name>).
type SerialStore struct{ *kv }

const prefixSerial = "serial/"

// NextSerial reserves the next number of a named counter (certificate serials,
// notification sequences), durably and following the clock in milliseconds, like
// NextOfferSeq.
func (s *SerialStore) NextSerial(name string, now time.Time) (uint64, error) {
	return s.nextSeq(prefixSerial+name, now)
}
