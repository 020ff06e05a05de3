package ledger

import (
	"errors"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/gpunex/gpunex/protocol"
)

// ReliabilityStore keeps what a coordinator scores each provider from
// (coordinator/reliability/).
type ReliabilityStore struct{ *kv }

const prefixReliability = "coordinator/reliability/"

// ReliabilityState is what a coordinator keeps per provider to score it.
type ReliabilityState struct {
	Provider    string               `json:"provider"`
	Reliability protocol.Reliability `json:"reliability"`
	// FirstPerf is each GPU's first accepted performance score: later attestations are
	// compared with it.
	FirstPerf     map[string]int `json:"first_perf"`
	LastAttestSeq uint64         `json:"last_attestation_seq"`
	// Events are the latest outcomes that lowered a component, newest last.
	Events []string `json:"events"`
	// EventsTotal counts every event ever added (Events keeps the latest few).
	EventsTotal int `json:"events_total,omitempty"`
	// LastScore is the score of the record last published (-1 before the first), at
	// LastPublished.
	LastScore     int       `json:"last_score"`
	LastPublished time.Time `json:"last_published,omitzero"`
}

// maxReliabilityEvents is how many events a reliability state keeps.
const maxReliabilityEvents = 10

// AddEvent records an outcome that lowered a component, keeping the latest few.
func (s *ReliabilityState) AddEvent(e string) {
	s.EventsTotal++
	s.Events = append(s.Events, e)
	if len(s.Events) > maxReliabilityEvents {
		s.Events = s.Events[len(s.Events)-maxReliabilityEvents:]
	}
}

// UpdateReliability changes a provider's reliability state atomically, creating it empty.
func (s *ReliabilityStore) UpdateReliability(provider string, f func(s *ReliabilityState) error) (ReliabilityState, error) {
	var st ReliabilityState
	err := s.update(func(txn *badger.Txn) error {
		return updateReliability(txn, provider, func(got *ReliabilityState) error {
			err := f(got)
			st = *got
			return err
		})
	})
	return st, err
}

// updateReliability is UpdateReliability within a transaction of the caller's.
func updateReliability(txn *badger.Txn, provider string, f func(s *ReliabilityState) error) error {
	key := prefixReliability + provider
	var st ReliabilityState
	if err := getJSON(txn, key, &st); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if st.Provider == "" {
		st = ReliabilityState{Provider: provider, FirstPerf: map[string]int{}, LastScore: -1}
	}
	if err := f(&st); err != nil {
		return err
	}
	return putJSON(txn, key, st)
}
