// Package config is a node's configuration (config.toml) and its home folder.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpunex/gpunex/protocol"
)

// Roles a node can take.
const (
	RoleProvider    = "provider"
	RoleRenter      = "renter"
	RoleCoordinator = "coordinator"
)

// Roles lists the valid roles.
var Roles = []string{RoleProvider, RoleRenter, RoleCoordinator}

// Duration is a time.Duration written as text ("10m", "90s") in config.toml.
type Duration struct{ time.Duration }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: %w (examples: 90s, 10m, 2h)", b, err)
	}
	d.Duration = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Config is config.toml. docs/config.md documents every field; Defaults gives each default.
type Config struct {
	Role   string       `toml:"role"`
	Log    LogConfig    `toml:"log"`
	P2P    P2PConfig    `toml:"p2p"`
	API    APIConfig    `toml:"api"`
	Offers OffersConfig `toml:"offers"`
	// Provider is read only when role is provider.
	Provider ProviderConfig `toml:"provider"`
	// Trust names the coordinators whose certificates, revocations and notifications
	// this node accepts.
	Trust TrustConfig `toml:"trust"`
	// Coordinator is read only when role is coordinator.
	Coordinator CoordinatorConfig `toml:"coordinator"`
	// Jobs is read only when role is provider.
	Jobs JobsConfig `toml:"jobs"`
	// Bench is read only when role is provider.
	Bench BenchConfig `toml:"bench"`
	// Settlement is the coordinator's treasury and payouts; Wallet the node's Solana wallet
	// (a renter deposits from it); Payout how a provider is paid.
	Settlement SettlementConfig `toml:"settlement"`
	Wallet     WalletConfig     `toml:"wallet"`
	Payout     PayoutConfig     `toml:"payout"`
	// Alerts are the node's messages to its operator (docs/operations.md, "Alerts").
	Alerts AlertsConfig `toml:"alerts"`
	// Debug holds settings for tests only (docs/config.md, "[debug]").
	Debug DebugConfig `toml:"debug"`
}

// DebugConfig is [debug]: settings that tests give a node to see how the network copes, never
// set in production.
type DebugConfig struct {
	// ClockOffset is added to the system clock for everything the node dates and times
	// (records, leases, holds, checkpoints): a node whose clock is skewed, for the soak.
	ClockOffset Duration `toml:"clock_offset"`
}

// MaxClockOffset bounds debug.clock_offset: an hour is a badly set clock; more is a typo.
const MaxClockOffset = time.Hour

// AlertsConfig is [alerts]: where the node tells its operator that something needs them,
// and when. Without email or webhook_url nothing is sent.
type AlertsConfig struct {
	Email             string `toml:"email"`               // the operator's address
	SMTPAddr          string `toml:"smtp_addr"`           // host:port
	SMTPFrom          string `toml:"smtp_from"`           // sender address
	SMTPUsername      string `toml:"smtp_username"`       // optional
	SMTPPasswordFile  string `toml:"smtp_password_file"`  // file holding the password, mode 0600
	WebhookURL        string `toml:"webhook_url"`         // receives a JSON POST per alert
	WebhookSecretFile string `toml:"webhook_secret_file"` // HMAC-SHA256 key, mode 0600; optional
	// ScoreBelow alerts when the provider's score falls under it (0: never).
	ScoreBelow int `toml:"score_below"`
	// DiskFreeGB alerts when the home's file system has less free (0: never).
	DiskFreeGB int64 `toml:"disk_free_gb"`
	// CertificateDays alerts when the certificate expires within this many days (0: never).
	CertificateDays int `toml:"certificate_days"`
}

// Notify is the channels of the alerts.
func (a AlertsConfig) Notify() NotifyConfig {
	return NotifyConfig{SMTPAddr: a.SMTPAddr, SMTPFrom: a.SMTPFrom, SMTPUsername: a.SMTPUsername, SMTPPasswordFile: a.SMTPPasswordFile,
		WebhookURL: a.WebhookURL, WebhookSecretFile: a.WebhookSecretFile}
}

// BenchConfig sets a provider's benchmark runs.
type BenchConfig struct {
	// Interval between runs; a run also follows a driver change and a coordinator's
	// challenge.
	Interval Duration `toml:"interval"`
	// StorageMB is how much the storage benchmark writes and reads.
	StorageMB int64 `toml:"storage_mb"`
	// NetworkMB is how much the network benchmark sends each way.
	NetworkMB int64 `toml:"network_mb"`
	// SimulatedUploadMbps slows the network benchmark's upload to this rate, to try what
	// a slow link does to the listing (devnet, tests); 0: as fast as the link goes.
	SimulatedUploadMbps float64 `toml:"simulated_upload_mbps"`
}

// JobsConfig sets how a provider runs jobs and which proposals it accepts.
type JobsConfig struct {
	// ContainerdAddress is the containerd socket jobs run through.
	ContainerdAddress string `toml:"containerd_address"`
	// Namespace is the containerd namespace of gpunex's containers and images.
	Namespace string `toml:"namespace"`
	// MaxImageMB refuses proposals whose image archive is larger, and bounds the layers
	// a pull downloads.
	MaxImageMB int64 `toml:"max_image_mb"`
	// MaxImageUnpackedMB refuses images whose files add up to more once unpacked (checked
	// before unpacking: a gzip bomb costs nothing but its reading).
	MaxImageUnpackedMB int64 `toml:"max_image_unpacked_mb"`
	// Registries are the registries jobs' images may be pulled from, at public addresses
	// only unless PrivateRegistries.
	Registries        []string `toml:"registries"`
	PrivateRegistries bool     `toml:"private_registries"`
	// ImageCacheGB bounds the images kept for later jobs; the least recently used are
	// deleted past it.
	ImageCacheGB int64 `toml:"image_cache_gb"`
	// Retention is how long an ended job's folder (log, output) is kept for its renter.
	Retention Duration `toml:"retention"`
	// Per allocated GPU: memory and CPU the job gets.
	MemoryMBPerGPU  int64 `toml:"memory_mb_per_gpu"`
	CPUMillisPerGPU int64 `toml:"cpu_millis_per_gpu"`
	// Pids and ScratchMB are per job.
	Pids      int64 `toml:"pids"`
	ScratchMB int64 `toml:"scratch_mb"`
	// BlockedRenters are peer IDs whose proposals are refused.
	BlockedRenters []string `toml:"blocked_renters"`
	// ProposalsPerMinute caps the proposals taken from one peer.
	ProposalsPerMinute int `toml:"proposals_per_minute"`
	// A job's renter reaches the ports the job declared through tunnels, one per TCP
	// connection (docs/protocols/jobs.md, "Job tunnels"): MaxTunnels at once per job (0:
	// none), TunnelGBPerJob carried by a job's tunnels in all, both ways (0: no bound), and
	// TunnelsPerMinute opened by one peer.
	MaxTunnels       int   `toml:"max_tunnels"`
	TunnelGBPerJob   int64 `toml:"tunnel_gb_per_job"`
	TunnelsPerMinute int   `toml:"tunnels_per_minute"`
	// RequireEscrow makes the provider start a job only against a coordinator's escrow
	// hold covering its maximum cost.
	RequireEscrow bool `toml:"require_escrow"`
	// CheckpointInterval is how often this node, as a renter, asks the providers of its
	// running jobs for a usage checkpoint and countersigns it (at most
	// protocol.CheckpointInterval).
	CheckpointInterval Duration `toml:"checkpoint_interval"`
	// UnmeteredStop makes a provider stop a job whose renter has countersigned no
	// checkpoint for this long (0: never). What a renter did not countersign is paid only
	// up to one interval past its last checkpoint.
	UnmeteredStop Duration `toml:"unmetered_stop"`
	// UnmeteredRenterBan is how long a provider refuses the proposals of a renter after
	// stopping one of its jobs for want of countersigned usage (0: never refuses).
	UnmeteredRenterBan Duration `toml:"unmetered_renter_ban"`
	// Egress is what jobs with egress reach: "deny" (no network; proposals asking for it
	// are refused), "public-only" (public addresses through NAT) or "allow" (also the
	// provider's private networks). Never the host, other jobs or link-local addresses
	// (cloud metadata). docs/sandbox.md.
	Egress string `toml:"egress"`
	// EgressMbps caps each job's traffic in each direction, in Mbit/s (0: no cap).
	EgressMbps int64 `toml:"egress_mbps"`
	// NetworkSubnet is the IPv4 network jobs with egress get their addresses from; nodes
	// on one host share it.
	NetworkSubnet string `toml:"network_subnet"`
	// DNS are the nameservers of jobs with egress.
	DNS []string `toml:"dns"`
	// EgressBlocked are more IPv4 addresses or networks no job reaches under any policy,
	// besides those always blocked (the host, link-local, cloud agents): the provider's
	// own services at public addresses, say. docs/sandbox.md.
	EgressBlocked []string `toml:"egress_blocked"`
	// UserNamespaces gives each job a user namespace of its own where the host can
	// (docs/sandbox.md); false runs jobs as the host's uid 65534.
	UserNamespaces bool `toml:"user_namespaces"`
	// Data in (docs/protocols/jobs.md): MaxInputMB is the largest input a job may bring
	// (stated in the offer; 0 takes none); InputCacheGB the disk kept for renters' input
	// chunks between their jobs (oldest used deleted first, and all after Retention).
	MaxInputMB   int64 `toml:"max_input_mb"`
	InputCacheGB int64 `toml:"input_cache_gb"`
	// MaxExecs is the most processes a job's renter may run in it at once with `gpunex job
	// exec` (shells); 0 allows none.
	MaxExecs int `toml:"max_execs"`
}

// SettlementConfig is [settlement]: a coordinator's treasury on Solana, its commission and
// its payouts (docs/settlement.md).
type SettlementConfig struct {
	// Network names a Solana cluster whose settings fill rpc, cluster and mint where they
	// are not given: "devnet" or "mainnet-beta" (SolanaNetworks); empty gives them one by
	// one (the local runtime of a devnet).
	Network string `toml:"network"`
	// RPC is the Solana JSON-RPC endpoint (the devnet's local runtime, solana-test-validator,
	// devnet or mainnet).
	RPC string `toml:"rpc"`
	// Cluster is the expected genesis hash of that cluster; a payout run stops when the RPC
	// endpoint answers another. Empty skips the check.
	Cluster string `toml:"cluster"`
	// Mint is the USDC mint (6 decimals).
	Mint string `toml:"mint"`
	// TreasuryKeypair is the treasury's Solana keypair file (Solana CLI JSON, mode 0600),
	// relative to the home folder unless absolute.
	TreasuryKeypair string `toml:"treasury_keypair"`
	// CommissionBPS is the coordinator's commission on each charge, in basis points.
	CommissionBPS int `toml:"commission_bps"`
	// MinPayoutUSDC is the least pending amount a scheduled payout pays.
	MinPayoutUSDC string `toml:"min_payout_usdc"`
	// PayoutCheck is how often the coordinator checks whether payouts are due.
	PayoutCheck Duration `toml:"payout_check"`
	// MarketInterval is how often market statistics are published; MarketWindow the
	// period they cover.
	MarketInterval Duration `toml:"market_interval"`
	MarketWindow   Duration `toml:"market_window"`
	// The coordinator's own bank account, the debtor of bank-transfer payout files.
	BankAccountName string `toml:"bank_account_name"`
	BankIBAN        string `toml:"bank_iban"`
	BankBIC         string `toml:"bank_bic"`
	// DisputeWindow is how long a final receipt the renter did not countersign waits
	// for a dispute before it is charged under the checkpoint rule.
	DisputeWindow Duration `toml:"dispute_window"`
}

// SolanaNetwork is a preset of settlement.network.
type SolanaNetwork struct {
	RPC, Cluster, Mint string
}

// SolanaNetworks are the presets of settlement.network: the public RPC endpoint, the
// genesis hash and Circle's USDC mint of each cluster. The public endpoints are rate
// limited; a coordinator in production gives its own rpc, with archival history (a payout
// whose transaction expired unseen is signed again only when the endpoint's history goes
// back to it: docs/settlement.md).
var SolanaNetworks = map[string]SolanaNetwork{
	"devnet":       {RPC: "https://api.devnet.solana.com", Cluster: "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG", Mint: "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU"},
	"mainnet-beta": {RPC: "https://api.mainnet-beta.solana.com", Cluster: "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d", Mint: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"},
}

// WalletConfig is [wallet]: the node's own Solana wallet.
type WalletConfig struct {
	// RPC is the Solana JSON-RPC endpoint deposits are sent through.
	RPC string `toml:"rpc"`
	// Keypair is the wallet's keypair file (Solana CLI JSON, mode 0600), relative to the
	// home folder unless absolute; created by `gpunex wallet init`.
	Keypair string `toml:"keypair"`
}

// PayoutConfig is [payout]: how and when a provider is paid. The provider signs it and
// sends it to its coordinator.
type PayoutConfig struct {
	Method        string `toml:"method"`   // usdc or bank
	Schedule      string `toml:"schedule"` // weekly or monthly
	SolanaAddress string `toml:"solana_address"`
	AccountName   string `toml:"account_name"`
	IBAN          string `toml:"iban"`
	BIC           string `toml:"bic"`
	// ChangeDelay is how long a change of the payout settings made from a dashboard session
	// waits before it applies (the operator is alerted and can cancel it meanwhile), unless
	// confirmed on the node's own terminal (gpunex payout confirm); 0 applies it at once.
	ChangeDelay Duration `toml:"change_delay"`
}

// Settings returns the payout settings to sign, or nil when none are configured.
func (p PayoutConfig) Settings() *protocol.PayoutSettings {
	if p.Method == "" {
		return nil
	}
	return &protocol.PayoutSettings{Version: protocol.SettlementVersion, Method: p.Method, Schedule: p.Schedule,
		SolanaAddress: p.SolanaAddress, AccountName: p.AccountName, IBAN: p.IBAN, BIC: p.BIC}
}

// TrustConfig lists trusted coordinators.
type TrustConfig struct {
	// Coordinators are peer IDs. Offers are accepted only with a certificate signed by one
	// of them; a coordinator node trusts itself as well.
	Coordinators []string `toml:"coordinators"`
}

// CoordinatorConfig sets how a coordinator certifies providers.
type CoordinatorConfig struct {
	// CertificateValidity is how long a certificate is valid after approval.
	CertificateValidity Duration `toml:"certificate_validity"`
	// CertificateRenewBefore is how long before its expiry an approved, unrevoked
	// provider's certificate is renewed (0: never renewed automatically).
	CertificateRenewBefore Duration `toml:"certificate_renew_before"`
	// ProbeInterval is the mean time between uptime probes of each provider (each probe
	// starts at a random moment between half and one and a half of it).
	ProbeInterval Duration `toml:"probe_interval"`
	// HalfLife is the decay half-life of the reliability score's components.
	HalfLife Duration `toml:"half_life"`
	// Notify sends decisions by e-mail and webhook as well as to the provider's node.
	Notify NotifyConfig `toml:"notify"`
	// Review sets the review deadline of applications and the reviewers' reminders.
	Review ReviewConfig `toml:"review"`
	// HostMinimum is the listing minimum this coordinator holds its providers' links and
	// jobs folders to, signed into each network receipt (docs/benchmarks.md, "Host
	// minimums").
	HostMinimum HostMinimumConfig `toml:"host_minimum"`
}

// ReviewConfig sets when a decision on an application is due, in business days, and whom
// to remind (docs/onboarding.md, "Review deadlines").
type ReviewConfig struct {
	// BusinessDays is how many business days after an application (or the applicant's
	// answer to a question) a decision is due.
	BusinessDays int `toml:"business_days"`
	// Timezone is where the business days are counted (an IANA name).
	Timezone string `toml:"timezone"`
	// Holidays are the days off besides Saturdays and Sundays, as YYYY-MM-DD.
	Holidays []string `toml:"holidays"`
	// RemindEmail receives the reviewers' reminders (with the webhook of
	// coordinator.notify); empty: the webhook and the log only.
	RemindEmail string `toml:"remind_email"`
}

// HostMinimumConfig is a coordinator's listing minimum (protocol.HostMinimum).
type HostMinimumConfig struct {
	UpMbps           float64 `toml:"up_mbps"`
	DownMbps         float64 `toml:"down_mbps"`
	MaxRTTMilli      float64 `toml:"max_rtt_ms"`
	StorageWriteMBps float64 `toml:"storage_write_mbps"`
	StorageReadMBps  float64 `toml:"storage_read_mbps"`
	StorageIOPS      float64 `toml:"storage_iops"`
	// EnterpriseMbps is the link, each way, this coordinator must have measured for the
	// Enterprise tier (once it measured the applicant's link at all).
	EnterpriseMbps float64 `toml:"enterprise_mbps"`
	// EnterpriseGrace is how long an Enterprise provider's link may stay measured under
	// EnterpriseMbps before its tier moves down to Community (0: never).
	EnterpriseGrace Duration `toml:"enterprise_grace"`
}

// Protocol is the minimum as the network receipts carry it.
func (m HostMinimumConfig) Protocol() protocol.HostMinimum {
	return protocol.HostMinimum{Name: protocol.ListingMinimum.Name, UpMbps: m.UpMbps, DownMbps: m.DownMbps, MaxRTTMilli: m.MaxRTTMilli,
		SeqWriteMBps: m.StorageWriteMBps, SeqReadMBps: m.StorageReadMBps, RandReadIOPS: m.StorageIOPS}
}

func hostMinimumConfig(m protocol.HostMinimum) HostMinimumConfig {
	return HostMinimumConfig{UpMbps: m.UpMbps, DownMbps: m.DownMbps, MaxRTTMilli: m.MaxRTTMilli,
		StorageWriteMBps: m.SeqWriteMBps, StorageReadMBps: m.SeqReadMBps, StorageIOPS: m.RandReadIOPS,
		EnterpriseMbps: protocol.EnterpriseMinimum.UpMbps, EnterpriseGrace: Duration{7 * 24 * time.Hour}}
}

// NotifyConfig configures outbound decision notices. Empty fields disable a channel.
type NotifyConfig struct {
	SMTPAddr          string `toml:"smtp_addr"`           // host:port
	SMTPFrom          string `toml:"smtp_from"`           // sender address
	SMTPUsername      string `toml:"smtp_username"`       // optional
	SMTPPasswordFile  string `toml:"smtp_password_file"`  // file holding the password, mode 0600
	WebhookURL        string `toml:"webhook_url"`         // receives a JSON POST per decision
	WebhookSecretFile string `toml:"webhook_secret_file"` // HMAC-SHA256 key, mode 0600; optional
}

// LogConfig sets logging.
type LogConfig struct {
	Level  string `toml:"level"`  // debug, info, warn, error
	Format string `toml:"format"` // text or json
}

// P2PConfig sets the libp2p host.
type P2PConfig struct {
	Listen    []string `toml:"listen"`    // multiaddrs, TCP and QUIC
	Bootstrap []string `toml:"bootstrap"` // multiaddrs ending in /p2p/<peer ID>: coordinators
	// Reachability is "auto" (AutoNAT finds out; behind NAT the node takes relay
	// reservations on its bootstrap coordinators and hole-punches), "public" (a coordinator
	// is reachable by its role: it serves relays) or "private".
	Reachability string `toml:"reachability"`
	// Relay limits the circuit relay a coordinator serves to nodes behind NAT.
	Relay RelayConfig `toml:"relay"`
	// MaxPeers is how many connections the node keeps: past it, the least useful are
	// closed down to three quarters of it (gossip mesh and DHT peers are kept first). Each
	// connection costs memory (docs/performance.md); a coordinator, which probes every
	// provider it certified, keeps more.
	MaxPeers int `toml:"max_peers"`
}

// DefaultMaxPeers is p2p.max_peers by role.
func DefaultMaxPeers(role string) int {
	if role == RoleCoordinator {
		return 2048
	}
	return 64
}

// RelayConfig limits a coordinator's circuit relay (libp2p circuit relay v2).
type RelayConfig struct {
	Reservations    int      `toml:"reservations"`      // nodes holding a relay slot at once
	CircuitsPerPeer int      `toml:"circuits_per_peer"` // relayed connections open per node
	CircuitDuration Duration `toml:"circuit_duration"`  // a relayed connection is reset after this long
	CircuitDataMB   int64    `toml:"circuit_data_mb"`   // ... or after this much data each way
}

// APIConfig sets the local API.
type APIConfig struct {
	Listen string `toml:"listen"` // loopback host:port; port 0 picks a free one
}

// OffersConfig sets how offers are announced and searched.
type OffersConfig struct {
	TTL           Duration `toml:"ttl"`            // validity of each announced offer
	Republish     Duration `toml:"republish"`      // re-announce interval; must be well under ttl
	SearchTimeout Duration `toml:"search_timeout"` // how long a search queries the DHT
	// WarmSearch is how long a search whose book follows gossip waits for the DHT walk:
	// the walk only adds what gossip missed, and what it fetches later is in the book for
	// the next search.
	WarmSearch Duration `toml:"warm_search"`
	// Models are the GPU models whose offers a renter follows (their gossip topics); empty:
	// every model of its coordinators' catalogues.
	Models []string `toml:"models"`
}

// ProviderConfig declares what a provider sells.
type ProviderConfig struct {
	Region       string             `toml:"region"`
	Availability AvailabilityConfig `toml:"availability"`
	GPUs         []GPUConfig        `toml:"gpus"`
}

// AvailabilityConfig is the weekly schedule during which the GPUs are offered.
type AvailabilityConfig struct {
	Timezone string   `toml:"timezone"`
	Windows  []string `toml:"windows"` // empty means 24/7
}

// GPUConfig declares one GPU model.
type GPUConfig struct {
	Model     string `toml:"model"`
	Count     int    `toml:"count"`
	VRAMGB    int    `toml:"vram_gb"`
	PriceUSDC string `toml:"price_usdc"` // per GPU-hour; `gpunex offer set-price` overrides it
	Simulated bool   `toml:"simulated"`  // no NVIDIA hardware behind it (devnet, tests)
	// PerfFactor makes simulated GPUs perform at this fraction of their datasheet (0.6: a
	// throttled GPU); 0 means 1.
	PerfFactor float64 `toml:"perf_factor"`
	// Lost makes this many of an entry's simulated GPUs (the last ones) report themselves
	// fallen off the bus, as NVML reports a lost GPU.
	Lost int `toml:"lost"`
	// ECCErrors makes an entry's simulated GPUs report this many volatile uncorrected ECC
	// errors, as a GPU whose memory failed does (the tests of a GPU fault under a job).
	ECCErrors int64 `toml:"ecc_errors"`
}

// BootstrapPeers parses p2p.bootstrap.
//
// The addresses of one peer are merged into one entry, in the order given: libp2p then dials
// them together and ranks them (QUIC first), rather than connecting over whichever is listed
// first. A node behind NAT hole-punches over the transports its peers have observed it on.
func (c *Config) BootstrapPeers() ([]peer.AddrInfo, error) {
	var out []peer.AddrInfo
	for _, s := range c.P2P.Bootstrap {
		ai, err := peer.AddrInfoFromString(s)
		if err != nil {
			return nil, fmt.Errorf("p2p.bootstrap %q: %v (expected a multiaddr ending in /p2p/<peer ID>)", s, err)
		}
		if i := slices.IndexFunc(out, func(o peer.AddrInfo) bool { return o.ID == ai.ID }); i >= 0 {
			out[i].Addrs = append(out[i].Addrs, ai.Addrs...)
			continue
		}
		out = append(out, *ai)
	}
	return out, nil
}

// NodeReachability is how the node takes its reachability: p2p.reachability, where "auto"
// means "public" for a coordinator (its providers and renters bootstrap from it and it
// serves them relays), and AutoNAT's finding for others.
func (c *Config) NodeReachability() string {
	r := c.P2P.Reachability
	if r == "" || r == "auto" {
		if c.Role == RoleCoordinator {
			return "public"
		}
		return "auto"
	}
	return r
}

// TrustedCoordinators parses trust.coordinators.
func (c *Config) TrustedCoordinators() ([]peer.ID, error) {
	var out []peer.ID
	for _, s := range c.Trust.Coordinators {
		id, err := peer.Decode(s)
		if err != nil {
			return nil, fmt.Errorf("trust.coordinators %q: not a peer ID (12D3KooW...): %v", s, err)
		}
		if !slices.Contains(out, id) { // listed twice (init with two addresses of one peer)
			out = append(out, id)
		}
	}
	return out, nil
}

// ErrNoCoordinator is returned when trust.coordinators is empty.
var ErrNoCoordinator = errors.New("no coordinator in trust.coordinators: set it in config.toml (or init with --bootstrap)")

// HomeCoordinator returns the first trusted coordinator: the one a node applies to, keeps its
// wallet with and reports to by default. A coordinator is its own.
func (c *Config) HomeCoordinator(self peer.ID) (peer.ID, error) {
	if c.Role == RoleCoordinator {
		return self, nil
	}
	ids, err := c.TrustedCoordinators()
	if err != nil {
		return "", err
	}
	if len(ids) == 0 {
		return "", ErrNoCoordinator
	}
	return ids[0], nil
}

// Schedule parses the availability schedule.
func (p *ProviderConfig) Schedule() (protocol.Schedule, error) {
	return protocol.ParseSchedule(p.Availability.Timezone, p.Availability.Windows)
}

// Items turns the declared GPUs into offer items with their configured prices.
func (p *ProviderConfig) Items() ([]protocol.OfferGPUs, error) {
	if len(p.GPUs) == 0 {
		return nil, errors.New("provider.gpus: a provider declares at least one [[provider.gpus]] entry")
	}
	var items []protocol.OfferGPUs
	seen := map[string]bool{}
	for i, g := range p.GPUs {
		price, err := protocol.ParseUSDC(g.PriceUSDC)
		if err != nil {
			return nil, fmt.Errorf("provider.gpus[%d].price_usdc: %w", i, err)
		}
		if g.PerfFactor < 0 || g.PerfFactor > 1.5 || (g.PerfFactor != 0 && !g.Simulated) {
			return nil, fmt.Errorf("provider.gpus[%d].perf_factor %g: only simulated GPUs take one, between 0 and 1.5", i, g.PerfFactor)
		}
		if g.Lost < 0 || g.Lost > g.Count || (g.Lost != 0 && !g.Simulated) {
			return nil, fmt.Errorf("provider.gpus[%d].lost %d: only simulated GPUs take one, between 0 and count", i, g.Lost)
		}
		if g.ECCErrors < 0 || (g.ECCErrors != 0 && !g.Simulated) {
			return nil, fmt.Errorf("provider.gpus[%d].ecc_errors %d: only simulated GPUs take one, 0 or more", i, g.ECCErrors)
		}
		it := protocol.OfferGPUs{Model: protocol.NormalizeModel(g.Model), Count: g.Count, VRAMGB: g.VRAMGB, PricePerGPUHour: price, Simulated: g.Simulated}
		if seen[it.Model] {
			return nil, fmt.Errorf("provider.gpus[%d]: model %s declared twice; use count", i, it.Model)
		}
		seen[it.Model] = true
		items = append(items, it)
	}
	probe := protocol.Offer{Seq: 1, IssuedAt: time.Unix(1, 0), ExpiresAt: time.Unix(2, 0), Region: protocol.NormalizeRegion(p.Region), GPUs: items}
	if err := probe.Validate(); err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	return items, nil
}

// Encode writes the config as TOML.
func (c *Config) Encode() ([]byte, error) {
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
