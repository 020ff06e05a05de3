package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	recordpb "github.com/libp2p/go-libp2p/core/record/pb"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/multiformats/go-multihash"
	"google.golang.org/protobuf/proto"
)

// Offer record: a provider's signed statement of the GPUs it rents out, at what price, where.
// See docs/protocols/offers.md.

const (
	// OfferVersion is the payload version this code writes and accepts.
	OfferVersion = 1
	// MaxOfferSize caps a marshalled offer envelope.
	MaxOfferSize = 128 << 10
	// MaxOfferTTL is the longest validity an offer may claim.
	MaxOfferTTL = 24 * time.Hour
	// MaxOfferItems caps the number of GPU models in one offer.
	MaxOfferItems = 16
	// MaxGPUsPerItem caps the count of one model in one offer.
	MaxGPUsPerItem = 256
	// MaxPricePerGPUHour caps a price: 10,000 USDC per GPU-hour.
	MaxPricePerGPUHour = 10_000 * MicroPerUSDC
	maxTextLen         = 64
	maxAddrs           = 16
	maxAddrLen         = 256
	// maxAvailabilityLen fits the text of MaxScheduleWindows windows and a zone name.
	maxAvailabilityLen = 1536
)

// OffersTopic is the gossipsub topic every offer was announced on before offers travelled
// by model. Providers still publish on it, and coordinators still follow it, so that nodes
// of the previous release keep their offers; renters follow the model topics.
const OffersTopic = "/gpunex/offers/1"

// ModelTopicPrefix starts the name of each GPU model's offer topic (ModelTopic).
const ModelTopicPrefix = "/gpunex/offers/model/1/"

// ModelTopic is the gossipsub topic on which the offers of one GPU model are announced: a
// provider publishes its offer on the topic of each model it declares, a renter follows
// the topics of the models it rents.
func ModelTopic(model string) string { return ModelTopicPrefix + NormalizeModel(model) }

// DHTProtocolPrefix makes the gpunex DHT private: it never mixes with the public IPFS DHT.
const DHTProtocolPrefix = "/gpunex"

// OfferNamespace is the DHT namespace of offer value records.
const OfferNamespace = "gpunex-offer"

// Offer is the payload of an offer record.
type Offer struct {
	Version   int       `json:"version"`
	Provider  string    `json:"provider"` // peer ID of the signer
	Seq       uint64    `json:"seq"`      // strictly increasing per provider; highest wins
	IssuedAt  time.Time `json:"issued_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Region    string    `json:"region"`
	// Availability is the provider's weekly schedule as text, for renters' information.
	Availability string `json:"availability"`
	// Withdrawn, when set, says why the provider offers nothing right now (outside its
	// availability window, shutting down). A withdrawn offer has no GPUs.
	Withdrawn string      `json:"withdrawn,omitempty"`
	GPUs      []OfferGPUs `json:"gpus"`
	// Addrs are multiaddrs where the provider accepts job negotiation streams.
	Addrs []string `json:"addrs,omitempty"`
	// Certificate is the coordinator's certificate for this provider (a certificate
	// envelope, base64 in JSON). Nodes accept an offer only with a valid certificate from
	// a coordinator they trust, within the models and counts it approves.
	Certificate []byte `json:"certificate,omitempty"`
	// Maintenance lists the provider's planned maintenance windows ahead (recurring rules
	// expanded): it owes no uptime during them.
	Maintenance []MaintenanceWindow `json:"maintenance,omitempty"`
	// Attestation is the provider's latest benchmark attestation (an attestation envelope),
	// when it has one: renters see each GPU's measured figures.
	Attestation []byte `json:"attestation,omitempty"`
	// Egress is what the provider's jobs with egress reach (its jobs.egress policy):
	// EgressPublicOnly or EgressAllow; empty: jobs get no network. EgressMbps caps each
	// job's traffic in each direction (0: no cap).
	Egress     string `json:"egress,omitempty"`
	EgressMbps int64  `json:"egress_mbps,omitempty"`
	// MaxInputBytes is the largest input (the bytes of its files) the provider takes for a
	// job (jobs.max_input_gb); absent: it takes none, or runs a build from before inputs
	// (input.go, docs/protocols/offers.md).
	MaxInputBytes int64 `json:"max_input_bytes,omitempty"`
}

// Egress policies: what a provider lets jobs with egress reach (jobs.egress,
// docs/sandbox.md).
const (
	// EgressDeny: jobs get no network; a proposal asking for egress is refused.
	EgressDeny = "deny"
	// EgressPublicOnly: public addresses only, through NAT.
	EgressPublicOnly = "public-only"
	// EgressAllow: public addresses and the provider's private networks (RFC 1918,
	// CGNAT), through NAT. The host itself, link-local addresses (cloud metadata) and
	// other jobs stay out of reach.
	EgressAllow = "allow"
)

// ValidEgress tells whether p names an egress policy.
func ValidEgress(p string) bool {
	return p == EgressDeny || p == EgressPublicOnly || p == EgressAllow
}

// OfferGPUs is one GPU model in an offer.
type OfferGPUs struct {
	Model  string `json:"model"`
	Count  int    `json:"count"`
	VRAMGB int    `json:"vram_gb"`
	// PricePerGPUHour is in micro-USDC per GPU per hour.
	PricePerGPUHour MicroUSDC `json:"price_micro_usdc_per_gpu_hour"`
	// Simulated marks GPUs with no NVIDIA hardware behind them (devnets, tests): renters
	// see it, so nobody rents one by mistake.
	Simulated bool `json:"simulated,omitempty"`
}

// NormalizeModel gives the canonical spelling of a GPU model name: upper case, trimmed.
// Models are compared in this form everywhere.
func NormalizeModel(m string) string { return strings.ToUpper(strings.TrimSpace(m)) }

// NormalizeRegion gives the canonical spelling of a region: lower case, trimmed.
func NormalizeRegion(r string) string { return strings.ToLower(strings.TrimSpace(r)) }

// OfferID names one GPU model of one provider's offer: "<peer ID>/<MODEL>".
func OfferID(provider peer.ID, model string) string {
	return provider.String() + "/" + NormalizeModel(model)
}

// ParseOfferID splits an offer ID into provider and model.
func ParseOfferID(id string) (peer.ID, string, error) {
	p, m, ok := strings.Cut(id, "/")
	if !ok || m == "" {
		return "", "", fmt.Errorf("offer ID %q: expected <provider peer ID>/<MODEL>", id)
	}
	pid, err := peer.Decode(p)
	if err != nil {
		return "", "", fmt.Errorf("offer ID %q: bad provider peer ID: %v", id, err)
	}
	return pid, NormalizeModel(m), nil
}

// OfferKey is the DHT key under which a provider's offer record is stored.
func OfferKey(provider peer.ID) string {
	return "/" + OfferNamespace + "/" + provider.String()
}

// ParseOfferKey returns the provider named by an offer DHT key.
func ParseOfferKey(key string) (peer.ID, error) {
	rest, ok := strings.CutPrefix(key, "/"+OfferNamespace+"/")
	if !ok {
		return "", fmt.Errorf("%w: key %q is not in the %s namespace", ErrInvalid, key, OfferNamespace)
	}
	pid, err := peer.Decode(rest)
	if err != nil {
		return "", fmt.Errorf("%w: key %q does not name a peer: %v", ErrInvalid, key, err)
	}
	return pid, nil
}

// contentKey derives the DHT content ID under which providers announce themselves for a
// search dimension ("model/H100-80GB", "region/eu-west", "all").
func contentKey(name string) cid.Cid {
	mh, err := multihash.Sum([]byte("gpunex/"+name), multihash.SHA2_256, -1)
	if err != nil {
		panic(err) // SHA2-256 is always available
	}
	return cid.NewCidV1(cid.Raw, mh)
}

// ModelKey is the DHT provider-record key for a GPU model.
func ModelKey(model string) cid.Cid { return contentKey("model/" + NormalizeModel(model)) }

// RegionKey is the DHT provider-record key for a region.
func RegionKey(region string) cid.Cid { return contentKey("region/" + NormalizeRegion(region)) }

// AllOffersKey is the DHT provider-record key every provider announced under before
// searches without a model walked the model keys. Providers no longer announce under it
// (the 20 nodes closest to it held the whole network); nodes of the previous release
// still search it.
func AllOffersKey() cid.Cid { return contentKey("all") }

// SignedOffer is an offer that passed every stateless check.
type SignedOffer struct {
	Offer   Offer
	Signer  peer.ID
	Raw     []byte
	Payload []byte // the signed payload: two copies of one record may differ in Raw, never here
	// Cert is the offer's certificate once a node has checked it against the coordinators
	// it trusts (nil before).
	Cert *SignedCertificate
	// Attest is the offer's benchmark attestation once checked (nil when it has none).
	Attest *SignedAttestation
}

// CheckOffer opens a marshalled offer envelope and applies every stateless rule at time now.
func CheckOffer(raw []byte, now time.Time) (*SignedOffer, error) {
	if len(raw) > MaxOfferSize {
		return nil, fmt.Errorf("%w: %d bytes, an offer is at most %d", ErrTooLarge, len(raw), MaxOfferSize)
	}
	env, err := Open(raw)
	if err != nil {
		return nil, err
	}
	if env.Kind != KindOffer {
		return nil, fmt.Errorf("%w: expected an offer, got a %s record", ErrUnknownKind, env.Kind)
	}
	o, err := checkOfferEnvelope(env, now)
	if err != nil {
		return nil, err
	}
	return &SignedOffer{Offer: *o, Signer: env.Signer, Raw: raw, Payload: env.Payload}, nil
}

// CheckOffers applies CheckOffer to many records at once, verifying their signatures as one
// batch (cheaper per record when most are valid: catalogue syncs, DHT answers). offers[i]
// is nil exactly when errs[i] is not.
func CheckOffers(raws [][]byte, now time.Time) (offers []*SignedOffer, errs []error) {
	offers, errs = make([]*SignedOffer, len(raws)), make([]error, len(raws))
	var batch []*unverified
	var at []int
	for i, raw := range raws {
		u, err := parseEnvelope(raw)
		switch {
		case err != nil:
			errs[i] = err
		case u.env.Kind != KindOffer:
			errs[i] = fmt.Errorf("%w: expected an offer, got a %s record", ErrUnknownKind, u.env.Kind)
		default:
			batch, at = append(batch, u), append(at, i)
		}
	}
	if len(batch) == 0 {
		return offers, errs
	}
	ok := verifyBatch(batch)
	for j, u := range batch {
		i := at[j]
		if !ok[j] {
			errs[i] = fmt.Errorf("%w: %s record", ErrBadSignature, u.env.Kind)
			continue
		}
		o, err := checkOfferEnvelope(u.env, now)
		if err != nil {
			errs[i] = err
			continue
		}
		offers[i] = &SignedOffer{Offer: *o, Signer: u.env.Signer, Raw: raws[i], Payload: u.env.Payload}
	}
	return offers, errs
}

func checkOfferEnvelope(env *Envelope, now time.Time) (*Offer, error) {
	if env.Kind != KindOffer {
		return nil, fmt.Errorf("%w: expected an offer, got %s", ErrUnknownKind, env.Kind)
	}
	var o Offer
	if err := decodePayload(env, OfferVersion, &o, func() int { return o.Version }); err != nil {
		return nil, err
	}
	if o.Provider != env.signerText {
		return nil, fmt.Errorf("%w: offer names provider %s but is signed by %s", ErrWrongSigner, o.Provider, env.Signer)
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := checkIssued(KindOffer, o.IssuedAt, o.ExpiresAt, now); err != nil {
		return nil, err
	}
	return &o, nil
}

// Validate applies the offer's own rules, independent of time and signer.
func (o *Offer) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: offer: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if o.Seq == 0 {
		return bad("seq must be positive")
	}
	if o.IssuedAt.IsZero() || o.ExpiresAt.IsZero() {
		return bad("issued_at and expires_at are required")
	}
	if !o.ExpiresAt.After(o.IssuedAt) {
		return bad("expires_at must be after issued_at")
	}
	if o.ExpiresAt.Sub(o.IssuedAt) > MaxOfferTTL {
		return bad("validity %s exceeds the %s limit", o.ExpiresAt.Sub(o.IssuedAt), MaxOfferTTL)
	}
	if err := checkText("region", o.Region, false); err != nil {
		return bad("%v", err)
	}
	if o.Region != NormalizeRegion(o.Region) {
		return bad("region %q is not in canonical form %q", o.Region, NormalizeRegion(o.Region))
	}
	if len(o.Availability) > maxAvailabilityLen {
		return bad("availability text too long")
	}
	if o.Egress != "" && o.Egress != EgressPublicOnly && o.Egress != EgressAllow {
		return bad("egress %q: %q, %q or absent", o.Egress, EgressPublicOnly, EgressAllow)
	}
	if o.EgressMbps < 0 || (o.Egress == "" && o.EgressMbps != 0) {
		return bad("egress_mbps %d without egress, or negative", o.EgressMbps)
	}
	if o.MaxInputBytes < 0 || o.MaxInputBytes > MaxInputBytes {
		return bad("max_input_bytes %d out of range 0-%d", o.MaxInputBytes, int64(MaxInputBytes))
	}
	if len(o.Withdrawn) > 256 {
		return bad("withdrawn reason too long")
	}
	if o.Withdrawn != "" && len(o.GPUs) > 0 {
		return bad("a withdrawn offer lists no GPUs")
	}
	if o.Withdrawn == "" && len(o.GPUs) == 0 {
		return bad("an offer lists at least one GPU model, or says why it is withdrawn")
	}
	if len(o.GPUs) > MaxOfferItems {
		return bad("%d GPU models, at most %d", len(o.GPUs), MaxOfferItems)
	}
	seen := map[string]bool{}
	for _, g := range o.GPUs {
		if err := checkText("model", g.Model, true); err != nil {
			return bad("%v", err)
		}
		if g.Model != NormalizeModel(g.Model) {
			return bad("model %q is not in canonical form %q", g.Model, NormalizeModel(g.Model))
		}
		if seen[g.Model] {
			return bad("model %s listed twice", g.Model)
		}
		seen[g.Model] = true
		if g.Count < 1 || g.Count > MaxGPUsPerItem {
			return bad("model %s: count %d out of range 1-%d", g.Model, g.Count, MaxGPUsPerItem)
		}
		if g.VRAMGB < 1 || g.VRAMGB > 4096 {
			return bad("model %s: vram_gb %d out of range 1-4096", g.Model, g.VRAMGB)
		}
		if g.PricePerGPUHour <= 0 || g.PricePerGPUHour > MaxPricePerGPUHour {
			return bad("model %s: price %d micro-USDC out of range", g.Model, g.PricePerGPUHour)
		}
	}
	if len(o.Maintenance) > MaxMaintenanceWindows {
		return bad("%d maintenance windows, at most %d", len(o.Maintenance), MaxMaintenanceWindows)
	}
	for _, w := range o.Maintenance {
		if err := w.validate(); err != nil {
			return bad("%v", err)
		}
	}
	if len(o.Attestation) > MaxAttestationSize {
		return bad("attestation of %d bytes, at most %d", len(o.Attestation), MaxAttestationSize)
	}
	if len(o.Certificate) > MaxCertificateSize {
		return bad("certificate of %d bytes, at most %d", len(o.Certificate), MaxCertificateSize)
	}
	if len(o.Addrs) > maxAddrs {
		return bad("%d addresses, at most %d", len(o.Addrs), maxAddrs)
	}
	for _, a := range o.Addrs {
		if len(a) == 0 || len(a) > maxAddrLen {
			return bad("address length %d out of range", len(a))
		}
		if _, err := ma.NewMultiaddr(a); err != nil {
			return bad("address %q is not a multiaddr", a)
		}
	}
	return nil
}

// checkText accepts 1-64 characters of letters, digits, '-', '_', '.', and (where spaces
// are allowed) spaces.
func checkText(field, s string, spaces bool) error {
	if s == "" || len(s) > maxTextLen {
		return fmt.Errorf("%s must be 1-%d characters", field, maxTextLen)
	}
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		case c == ' ' && spaces:
		default:
			return fmt.Errorf("%s %q: character %q not allowed", field, s, c)
		}
	}
	return nil
}

// PeekOfferSeq reads the sequence of an offer envelope WITHOUT checking it. Use it only on
// records that were verified before (the DHT's Select step).
func PeekOfferSeq(raw []byte) (uint64, error) {
	var pbe recordpb.Envelope
	if err := proto.Unmarshal(raw, &pbe); err != nil {
		return 0, fmt.Errorf("%w: envelope: %v", ErrMalformed, err)
	}
	var o struct {
		Seq uint64 `json:"seq"`
	}
	if err := json.Unmarshal(pbe.Payload, &o); err != nil {
		return 0, fmt.Errorf("%w: offer payload: %v", ErrMalformed, err)
	}
	return o.Seq, nil
}

// OfferProtocol is the stream protocol on which a provider answers with its current signed
// offer record: the client opens a stream and reads; the provider writes the marshalled
// envelope (at most MaxOfferSize bytes) and closes. Searches use it to get an offer straight
// from a provider found in the DHT, and fall back to the DHT value record.
const OfferProtocol = "/gpunex/offer/1.0.0"

// OfferSyncProtocol is the stream protocol on which any node hands over the live offer
// records it holds, so that a node that just joined has the catalogue at once rather than
// after the next republish. The client writes an OfferSyncRequest as one JSON frame (a
// client of the previous release writes nothing) and closes its write side; the server
// writes each marshalled envelope the request asks for, prefixed by its length as an
// unsigned varint, at most MaxSyncOffers records, and closes. The client verifies every
// record as if it came from gossip.
const OfferSyncProtocol = "/gpunex/offer-sync/1.0.0"

// OfferSyncRequest narrows a catalogue sync to the offers of some models and regions (each
// list empty: all). A renter that follows a few models asks for theirs; a search for one
// model asks for that model's.
type OfferSyncRequest struct {
	Models  []string `json:"models,omitempty"`
	Regions []string `json:"regions,omitempty"`
}

// MaxOfferSyncRequest caps a sync request's frame; MaxOfferSyncFilter the entries of each
// of its lists.
const (
	MaxOfferSyncRequest = 4096
	MaxOfferSyncFilter  = 64
)

// Check refuses a request with more than MaxOfferSyncFilter entries in a list.
func (r OfferSyncRequest) Check() error {
	if len(r.Models) > MaxOfferSyncFilter || len(r.Regions) > MaxOfferSyncFilter {
		return fmt.Errorf("%w: a sync request names %d models and %d regions, at most %d each", ErrInvalid, len(r.Models), len(r.Regions), MaxOfferSyncFilter)
	}
	return nil
}

// Matches says whether an offer is one the request asks for: one of its models (any GPU
// entry) and one of its regions, an empty list matching any.
func (r OfferSyncRequest) Matches(o *Offer) bool {
	if len(r.Regions) > 0 && !slices.ContainsFunc(r.Regions, func(x string) bool { return NormalizeRegion(x) == NormalizeRegion(o.Region) }) {
		return false
	}
	if len(r.Models) == 0 {
		return true
	}
	for _, g := range o.GPUs {
		if slices.ContainsFunc(r.Models, func(m string) bool { return NormalizeModel(m) == g.Model }) {
			return true
		}
	}
	return false
}

// MaxSyncOffers caps the records in one sync answer (at most 160 MiB of records).
const MaxSyncOffers = 20_000
