package offers

import (
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/protocol"
)

// Trust decides whether a provider is certified: the coordinators this node trusts,
// and the revocations it knows (kept in the ledger, so they outlive restarts).
type Trust struct {
	trust protocol.Trust
	store *ledger.OfferStore // keeps the revocations known
	// models are the model catalogues attestations are checked with.
	models protocol.ModelsLookup

	mu   sync.RWMutex
	revs map[peer.ID][]*protocol.SignedRevocation // by provider

	// Certificates and attestations ride in every offer a provider publishes, unchanged
	// for days: their signatures are checked once and the results kept by their bytes.
	// Only the time rules are applied again.
	certs   verifiedCache[protocol.SignedCertificate]
	attests verifiedCache[protocol.SignedAttestation]
}

// verifiedCache keeps records whose signatures were checked, by their bytes; it is
// emptied when it holds maxVerifiedCache of them.
type verifiedCache[T any] struct {
	mu sync.Mutex
	m  map[string]*T
}

const maxVerifiedCache = 8192

// get returns the record for raw, checking it with check the first time.
func (c *verifiedCache[T]) get(raw []byte, check func() (*T, error)) (v *T, fresh bool, err error) {
	c.mu.Lock()
	v = c.m[string(raw)]
	c.mu.Unlock()
	if v != nil {
		return v, false, nil
	}
	if v, err = check(); err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxVerifiedCache {
		c.m = map[string]*T{}
	}
	c.m[string(raw)] = v
	c.mu.Unlock()
	return v, true, nil
}

// certificate checks a certificate, its signatures once per distinct record.
func (t *Trust) certificate(raw []byte, now time.Time) (*protocol.SignedCertificate, error) {
	c, fresh, err := t.certs.get(raw, func() (*protocol.SignedCertificate, error) { return protocol.CheckCertificate(raw, now, t.trust) })
	if err == nil && !fresh {
		err = protocol.CheckIssued(protocol.KindCertificate, c.IssuedAt, c.ExpiresAt, now)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// attestation checks a benchmark attestation, its signatures once per distinct record.
func (t *Trust) attestation(raw []byte, now time.Time) (*protocol.SignedAttestation, error) {
	a, fresh, err := t.attests.get(raw, func() (*protocol.SignedAttestation, error) {
		return protocol.CheckAttestation(raw, now, t.trust, t.models)
	})
	if err == nil && !fresh {
		err = protocol.CheckIssued(protocol.KindAttestation, a.IssuedAt, a.Challenge.IssuedAt.Add(protocol.MaxAttestationAge), now)
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// NewTrust returns the trust store of a node that trusts the given coordinators and checks
// attestations with the model catalogues models holds (nil: the first catalogue only).
func NewTrust(l *ledger.OfferStore, trusted []peer.ID, models protocol.ModelsLookup) (*Trust, error) {
	if models == nil {
		models = protocol.FirstModelsOnly
	}
	t := &Trust{trust: protocol.NewTrust(trusted...), store: l, models: models, revs: map[peer.ID][]*protocol.SignedRevocation{}}
	raws, err := l.Revocations()
	if err != nil {
		return nil, fmt.Errorf("load revocations: %w", err)
	}
	for _, raw := range raws {
		// A revocation from a coordinator no longer trusted is kept but has no effect.
		if r, err := protocol.CheckRevocation(raw, time.Now().Add(protocol.MaxClockSkew), t.trust); err == nil {
			t.revs[r.Provider] = append(t.revs[r.Provider], r)
		}
	}
	return t, nil
}

// certify checks the certificate an offer carries and records it in so.Cert.
func (t *Trust) certify(so *protocol.SignedOffer, now time.Time) error {
	c, err := protocol.CertifyOffer(&so.Offer, func(raw []byte) (*protocol.SignedCertificate, error) { return t.certificate(raw, now) })
	if err != nil {
		return err
	}
	if r := t.RevocationOf(c); r != nil {
		return fmt.Errorf("%w: by %s at %s: %s", protocol.ErrRevoked, r.Signer, r.IssuedAt.UTC().Format(time.RFC3339), r.Reason)
	}
	so.Cert = c
	if len(so.Offer.Attestation) > 0 {
		a, err := t.attestation(so.Offer.Attestation, now)
		if err != nil {
			return fmt.Errorf("offer's attestation: %w", err)
		}
		if a.Signer != so.Signer {
			return fmt.Errorf("%w: offer of %s carries an attestation by %s", protocol.ErrWrongSigner, so.Signer, a.Signer)
		}
		so.Attest = a
	}
	return nil
}

// revocationOf returns the revocation that covers a certificate, or nil.
func (t *Trust) RevocationOf(c *protocol.SignedCertificate) *protocol.SignedRevocation {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, r := range t.revs[peerOf(c.Provider)] {
		if r.Revokes(c) {
			return r
		}
	}
	return nil
}

// addRevocation checks a revocation record and keeps it. fresh is false when it was known.
func (t *Trust) addRevocation(raw []byte, now time.Time) (r *protocol.SignedRevocation, fresh bool, err error) {
	r, err = protocol.CheckRevocation(raw, now, t.trust)
	if err != nil {
		return nil, false, err
	}
	t.mu.Lock()
	for _, old := range t.revs[r.Provider] {
		if old.Signer == r.Signer && !old.IssuedAt.Before(r.IssuedAt) {
			t.mu.Unlock()
			return old, false, nil
		}
	}
	kept := t.revs[r.Provider][:0:0]
	for _, old := range t.revs[r.Provider] {
		if old.Signer != r.Signer {
			kept = append(kept, old)
		}
	}
	t.revs[r.Provider] = append(kept, r)
	t.mu.Unlock()
	if err := t.store.SaveRevocation(r.Signer.String(), r.Provider.String(), raw); err != nil {
		return nil, false, err
	}
	return r, true, nil
}

// Revocations returns every revocation record held.
func (t *Trust) Revocations() [][]byte {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out [][]byte
	for _, rs := range t.revs {
		for _, r := range rs {
			out = append(out, r.Raw)
		}
	}
	return out
}

func peerOf(s string) peer.ID {
	id, _ := peer.Decode(s)
	return id
}
