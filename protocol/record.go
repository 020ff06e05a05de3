package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	cryptopb "github.com/libp2p/go-libp2p/core/crypto/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	recordpb "github.com/libp2p/go-libp2p/core/record/pb"
	"github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
	"google.golang.org/protobuf/proto"
)

// Kind names a type of signed record.
type Kind string

// The record kinds this version understands.
const (
	KindOffer            Kind = "offer"
	KindApplication      Kind = "application"
	KindCertificate      Kind = "certificate"
	KindRevocation       Kind = "revocation"
	KindNotification     Kind = "notification"
	KindProposal         Kind = "proposal"
	KindLease            Kind = "lease"
	KindReceipt          Kind = "receipt"
	KindCountersignature Kind = "countersignature"
	KindChallenge        Kind = "challenge"
	KindAttestation      Kind = "attestation"
	KindNetworkReceipt   Kind = "network-receipt"
	KindUptimeProof      Kind = "uptime-proof"
	KindScore            Kind = "score"
)

// MaxClockSkew is how far in the future a record's issue time may lie before it is rejected.
const MaxClockSkew = 5 * time.Minute

// FarFuture is how far beyond MaxClockSkew a record's time must lie to be ErrFarFuture
// rather than ErrFuture: a relay with a skewed clock may forward the latter, not the former.
const FarFuture = time.Hour

// futureErr is the error of a record of kind dated at t, later than now plus MaxClockSkew.
func futureErr(kind Kind, what string, t, now time.Time) error {
	if t.After(now.Add(MaxClockSkew + FarFuture)) {
		return fmt.Errorf("%w: %s %s %s", ErrFarFuture, kind, what, t.UTC().Format(time.RFC3339))
	}
	return fmt.Errorf("%w: %s %s %s", ErrFuture, kind, what, t.UTC().Format(time.RFC3339))
}

// Rejection reasons. Every error returned by Open and the Check functions wraps exactly one
// of them, so callers can count rejections by reason (see Reason).
var (
	ErrTooLarge       = errors.New("record too large")
	ErrMalformed      = errors.New("malformed record")
	ErrUnknownKind    = errors.New("unknown record kind")
	ErrBadSignature   = errors.New("bad signature")
	ErrUnknownVersion = errors.New("unknown record version")
	ErrInvalid        = errors.New("invalid record")
	ErrWrongSigner    = errors.New("record signed by another peer")
	ErrExpired        = errors.New("record expired")
	ErrFuture         = errors.New("record issued in the future")
	// ErrFarFuture: issued more than FarFuture beyond the clock skew allowed. No honest
	// clock is that far off: only the record's author makes such a record.
	ErrFarFuture = errors.New("record issued far in the future")
	ErrReplay    = errors.New("replayed record: older sequence than one already seen")
	// ErrUnknownModels: a record scored with a model catalogue this node does not hold
	// (yet: catalogues are gossiped, and kept once received).
	ErrUnknownModels = errors.New("model catalogue not held")
)

var reasons = []struct {
	err  error
	name string
}{
	{ErrTooLarge, "too_large"},
	{ErrMalformed, "malformed"},
	{ErrUnknownKind, "unknown_kind"},
	{ErrBadSignature, "bad_signature"},
	{ErrUnknownVersion, "unknown_version"},
	{ErrInvalid, "invalid"},
	{ErrWrongSigner, "wrong_signer"},
	{ErrExpired, "expired"},
	{ErrFarFuture, "far_future"},
	{ErrFuture, "future"},
	{ErrReplay, "replay"},
	{ErrUnknownModels, "unknown_models"},
	{ErrSelfSigned, "self_signed"},
	{ErrUntrusted, "untrusted"},
	{ErrNotCertified, "uncertified"},
	{ErrRevoked, "revoked"},
	{ErrNotApproved, "not_approved"},
}

// Reason returns a short label for a rejection error ("bad_signature", "replay", ...), for
// metrics. Errors that wrap none of the sentinels are "other".
func Reason(err error) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "other"
}

// kindSpec is what the envelope layer needs to know about one record kind.
type kindSpec struct {
	kind    Kind
	domain  string // signature domain: a signature for one kind never verifies as another
	codec   []byte // envelope payload type
	maxSize int    // cap on the whole marshalled envelope
}

var kindSpecs = []kindSpec{
	{kind: KindOffer, domain: "/gpunex/record/offer", codec: []byte("/gpunex/offer"), maxSize: MaxOfferSize},
	{kind: KindApplication, domain: "/gpunex/record/application", codec: []byte("/gpunex/application"), maxSize: MaxApplicationSize},
	{kind: KindCertificate, domain: "/gpunex/record/certificate", codec: []byte("/gpunex/certificate"), maxSize: MaxCertificateSize},
	{kind: KindRevocation, domain: "/gpunex/record/revocation", codec: []byte("/gpunex/revocation"), maxSize: MaxRevocationSize},
	{kind: KindNotification, domain: "/gpunex/record/notification", codec: []byte("/gpunex/notification"), maxSize: MaxNotificationSize},
	{kind: KindProposal, domain: "/gpunex/record/proposal", codec: []byte("/gpunex/proposal"), maxSize: MaxProposalSize},
	{kind: KindLease, domain: "/gpunex/record/lease", codec: []byte("/gpunex/lease"), maxSize: MaxLeaseSize},
	{kind: KindReceipt, domain: "/gpunex/record/receipt", codec: []byte("/gpunex/receipt"), maxSize: MaxReceiptSize},
	{kind: KindCountersignature, domain: "/gpunex/record/countersignature", codec: []byte("/gpunex/countersignature"), maxSize: MaxCountersignatureSize},
	{kind: KindChallenge, domain: "/gpunex/record/challenge", codec: []byte("/gpunex/challenge"), maxSize: MaxChallengeSize},
	{kind: KindAttestation, domain: "/gpunex/record/attestation", codec: []byte("/gpunex/attestation"), maxSize: MaxAttestationSize},
	{kind: KindNetworkReceipt, domain: "/gpunex/record/network-receipt", codec: []byte("/gpunex/network-receipt"), maxSize: MaxNetworkReceiptSize},
	{kind: KindUptimeProof, domain: "/gpunex/record/uptime-proof", codec: []byte("/gpunex/uptime-proof"), maxSize: MaxUptimeProofSize},
	{kind: KindScore, domain: "/gpunex/record/score", codec: []byte("/gpunex/score"), maxSize: MaxScoreSize},
	{kind: KindCheckpoint, domain: "/gpunex/record/usage-checkpoint", codec: []byte("/gpunex/usage-checkpoint"), maxSize: MaxCheckpointSize},
	{kind: KindDispute, domain: "/gpunex/record/usage-dispute", codec: []byte("/gpunex/usage-dispute"), maxSize: MaxDisputeSize},
	{kind: KindDecision, domain: "/gpunex/record/dispute-decision", codec: []byte("/gpunex/dispute-decision"), maxSize: MaxDecisionSize},
	{kind: KindEscrowHold, domain: "/gpunex/record/escrow-hold", codec: []byte("/gpunex/escrow-hold"), maxSize: MaxEscrowHoldSize},
	{kind: KindPayoutSettings, domain: "/gpunex/record/payout-settings", codec: []byte("/gpunex/payout-settings"), maxSize: MaxPayoutSettingsSize},
	{kind: KindPayoutBatch, domain: "/gpunex/record/payout-batch", codec: []byte("/gpunex/payout-batch"), maxSize: MaxPayoutBatchSize},
	{kind: KindMarketStats, domain: "/gpunex/record/market-stats", codec: []byte("/gpunex/market-stats"), maxSize: MaxMarketStatsSize},
	{kind: KindModelCatalogue, domain: "/gpunex/record/model-catalogue", codec: []byte("/gpunex/model-catalogue"), maxSize: MaxModelCatalogueSize},
}

func specFor(k Kind) (kindSpec, bool) {
	for _, s := range kindSpecs {
		if s.kind == k {
			return s, true
		}
	}
	return kindSpec{}, false
}

func specForCodec(codec []byte) (kindSpec, bool) {
	for _, s := range kindSpecs {
		if bytes.Equal(s.codec, codec) {
			return s, true
		}
	}
	return kindSpec{}, false
}

// payloadRecord adapts raw JSON bytes to libp2p's record.Record so that record.Seal signs
// them; decoding is ours (strict JSON), not the libp2p registry's.
type payloadRecord struct {
	spec kindSpec
	data []byte
}

func (r *payloadRecord) Domain() string                 { return r.spec.domain }
func (r *payloadRecord) Codec() []byte                  { return r.spec.codec }
func (r *payloadRecord) MarshalRecord() ([]byte, error) { return r.data, nil }
func (r *payloadRecord) UnmarshalRecord(b []byte) error { r.data = b; return nil }

var _ record.Record = (*payloadRecord)(nil)

// Seal marshals payload as JSON and signs it into a libp2p signed envelope of the given kind.
func Seal(kind Kind, payload any, key crypto.PrivKey) ([]byte, error) {
	spec, ok := specFor(kind)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKind, kind)
	}
	data, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("encode %s record: %w", kind, err)
	}
	env, err := record.Seal(&payloadRecord{spec: spec, data: data}, key)
	if err != nil {
		return nil, fmt.Errorf("sign %s record: %w", kind, err)
	}
	out, err := env.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encode %s envelope: %w", kind, err)
	}
	if len(out) > spec.maxSize {
		return nil, fmt.Errorf("%w: %s record is %d bytes, the limit is %d", ErrTooLarge, kind, len(out), spec.maxSize)
	}
	return out, nil
}

// Envelope is a signed record whose signature has been checked, but whose payload has not
// been validated yet.
type Envelope struct {
	Kind    Kind
	Signer  peer.ID
	Payload []byte // JSON, exactly as signed

	signerText string // Signer.String()
	Raw        []byte // the whole envelope, exactly as received
}

// maxEnvelopeSize is the largest cap of any kind: bigger input is refused before parsing.
func maxEnvelopeSize() int {
	m := 0
	for _, s := range kindSpecs {
		m = max(m, s.maxSize)
	}
	return m
}

// Open parses a marshalled envelope, finds its kind, enforces that kind's size cap and
// checks the signature. It does not look at the payload.
func Open(raw []byte) (*Envelope, error) {
	u, err := parseEnvelope(raw)
	if err != nil {
		return nil, err
	}
	if !u.signer.verify(u.signed, u.sig) {
		return nil, fmt.Errorf("%w: %s record", ErrBadSignature, u.env.Kind)
	}
	return u.env, nil
}

// unverified is a parsed envelope whose signature is still to be checked.
type unverified struct {
	env    *Envelope
	signer *signer
	signed []byte // the bytes the signature covers
	sig    []byte
}

func parseEnvelope(raw []byte) (*unverified, error) {
	if len(raw) > maxEnvelopeSize() {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, len(raw))
	}
	var pbe recordpb.Envelope
	if err := proto.Unmarshal(raw, &pbe); err != nil {
		return nil, fmt.Errorf("%w: envelope: %v", ErrMalformed, err)
	}
	spec, ok := specForCodec(pbe.PayloadType)
	if !ok {
		return nil, fmt.Errorf("%w: payload type %q", ErrUnknownKind, truncate(pbe.PayloadType, 40))
	}
	if len(raw) > spec.maxSize {
		return nil, fmt.Errorf("%w: %s record is %d bytes, the limit is %d", ErrTooLarge, spec.kind, len(raw), spec.maxSize)
	}
	if pbe.PublicKey == nil || len(pbe.Signature) == 0 {
		return nil, fmt.Errorf("%w: envelope lacks a key or a signature", ErrMalformed)
	}
	if pbe.PublicKey.GetType() != cryptopb.KeyType_Ed25519 || len(pbe.PublicKey.Data) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: only Ed25519 keys are accepted", ErrMalformed)
	}
	s, err := signerFor(pbe.PublicKey.Data)
	if err != nil {
		return nil, fmt.Errorf("%w: public key: %v", ErrMalformed, err)
	}
	return &unverified{
		env:    &Envelope{Kind: spec.kind, Signer: s.id, signerText: s.str, Payload: pbe.Payload, Raw: raw},
		signer: s,
		signed: signedBytes(spec.domain, pbe.PayloadType, pbe.Payload),
		sig:    pbe.Signature,
	}, nil
}

// signedBytes is what libp2p's envelope signs: domain, payload type and payload, each
// prefixed with its length as an unsigned varint.
func signedBytes(domain string, payloadType, payload []byte) []byte {
	b := make([]byte, 0, len(domain)+len(payloadType)+len(payload)+3*binary.MaxVarintLen64)
	b = binary.AppendUvarint(b, uint64(len(domain)))
	b = append(b, domain...)
	b = binary.AppendUvarint(b, uint64(len(payloadType)))
	b = append(b, payloadType...)
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...)
}

// decodeStrict decodes JSON into v, refusing unknown fields, trailing data, and member
// names repeated or not exactly a field's name (strictjson.go).
func decodeStrict(data []byte, v any) error {
	if err := checkMemberNames(data, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// decodePayload decodes a record's JSON payload strictly into v (a struct pointer whose
// version it then reads through versionOf) and checks that it is the version this code
// understands. A newer version is ErrUnknownVersion, anything else that does not decode is
// ErrMalformed.
func decodePayload(env *Envelope, want int, v any, versionOf func() int) error {
	if err := decodeStrict(env.Payload, v); err != nil {
		// A newer version may carry fields this node does not know: say so rather than
		// calling it malformed.
		if got, verr := version(env.Payload); verr == nil && got != want {
			return fmt.Errorf("%w: %s version %d (this node understands %d)", ErrUnknownVersion, env.Kind, got, want)
		}
		return fmt.Errorf("%w: %s payload: %v", ErrMalformed, env.Kind, err)
	}
	if got := versionOf(); got != want {
		return fmt.Errorf("%w: %s version %d (this node understands %d)", ErrUnknownVersion, env.Kind, got, want)
	}
	return nil
}

// CheckIssued applies the clock rules every kind shares to a record of that kind checked
// before (a node re-checking a cached certificate or attestation at a later time).
func CheckIssued(kind Kind, issued, expires, now time.Time) error {
	return checkIssued(kind, issued, expires, now)
}

// checkIssued applies the clock rules shared by every kind: not issued in the future
// (beyond MaxClockSkew), not expired. A zero expiry means the record does not expire.
func checkIssued(kind Kind, issued, expires, now time.Time) error {
	if issued.After(now.Add(MaxClockSkew)) {
		return futureErr(kind, "issued at", issued, now)
	}
	if !expires.IsZero() && !now.Before(expires) {
		return fmt.Errorf("%w: %s expired at %s", ErrExpired, kind, expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// version reads only the "version" field of a JSON payload.
func version(data []byte) (int, error) {
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return 0, err
	}
	return v.Version, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// Verified is a record that passed every stateless check: signature, size, format, version,
// the kind's own rules and expiry.
type Verified struct {
	Kind   Kind
	Signer peer.ID
	Raw    []byte
	Record any // *Offer, ...
	// Note says what was not checked, when something was not.
	Note string
}

// Verify opens any signed record and applies the stateless rules of its kind at time now.
// It is what `gpunex verify` runs. It does not judge whether a coordinator is trusted: the
// caller prints the signer.
func Verify(raw []byte, now time.Time) (*Verified, error) {
	env, err := Open(raw)
	if err != nil {
		return nil, err
	}
	var rec any
	note := ""
	switch env.Kind {
	case KindOffer:
		rec, err = checkOfferEnvelope(env, now)
	case KindApplication:
		rec, err = checkApplicationEnvelope(env, now)
	case KindCertificate:
		rec, err = CheckCertificate(raw, now, nil)
	case KindRevocation:
		rec, err = CheckRevocation(raw, now, nil)
	case KindNotification:
		rec, err = CheckNotification(raw, now, nil, "")
	case KindProposal:
		rec, err = CheckProposal(raw, now)
	case KindAttestation:
		rec, err = CheckAttestation(raw, now, nil, FirstModelsOnly)
		if errors.Is(err, ErrUnknownModels) {
			// Scored with a coordinator's catalogue, which a lone record does not carry:
			// every other rule is checked.
			note = fmt.Sprintf("scores and delisting reasons not checked: %v (a node checks them with the catalogue it holds)", err)
			rec, err = checkAttestation(raw, now, nil, nil)
		}
	case KindScore:
		rec, err = CheckScore(raw, now, nil)
	case KindEscrowHold:
		rec, err = CheckHold(raw, now, nil)
	case KindPayoutSettings:
		rec, _, err = CheckPayoutSettings(raw, now)
	case KindPayoutBatch:
		rec, err = CheckBatch(raw, nil)
	case KindModelCatalogue:
		rec, err = CheckModelCatalogue(raw, now, nil)
	case KindMarketStats:
		rec, err = CheckMarketStats(raw, now, nil)
	case KindUptimeProof:
		var u UptimeProof
		if err = decodePayload(env, ScoreVersion, &u, func() int { return u.Version }); err == nil {
			rec = &u
		}
	case KindChallenge:
		var c Challenge
		if err = decodePayload(env, AttestationVersion, &c, func() int { return c.Version }); err == nil {
			rec = &c
		}
	case KindNetworkReceipt:
		var r NetworkReceipt
		if err = decodePayload(env, AttestationVersion, &r, func() int { return r.Version }); err == nil {
			rec = &r
		}
	case KindLease, KindReceipt, KindCountersignature, KindCheckpoint, KindDispute, KindDecision:
		// Checked against the records they follow from; here only signature and format.
		var v any
		switch env.Kind {
		case KindLease:
			v = &Lease{}
		case KindReceipt:
			v = &Receipt{}
		case KindCheckpoint:
			v = &Checkpoint{}
		case KindDispute:
			v = &Dispute{}
		case KindDecision:
			v = &Decision{}
		default:
			v = &Countersignature{}
		}
		if err = decodeStrict(env.Payload, v); err != nil {
			err = fmt.Errorf("%w: %s payload: %v", ErrMalformed, env.Kind, err)
		}
		rec = v
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnknownKind, env.Kind)
	}
	if err != nil {
		return nil, err
	}
	return &Verified{Kind: env.Kind, Signer: env.Signer, Raw: raw, Record: rec, Note: note}, nil
}
