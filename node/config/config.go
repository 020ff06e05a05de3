// Package config is a node's configuration (config.toml) and its home folder.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"log/slog"
	"net"

	"github.com/BurntSushi/toml"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

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
}

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
	// UserNamespaces gives each job a user namespace of its own where the host can
	// (docs/sandbox.md); false runs jobs as the host's uid 65534.
	UserNamespaces bool `toml:"user_namespaces"`
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

// Defaults returns the configuration a new home starts with.
func Defaults(role string) Config {
	c := Config{
		Role: role,
		Log:  LogConfig{Level: "info", Format: "text"},
		P2P: P2PConfig{
			Listen:       []string{"/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"},
			Reachability: "auto",
			Relay:        RelayConfig{Reservations: 1024, CircuitsPerPeer: 16, CircuitDuration: Duration{time.Hour}, CircuitDataMB: 512},
			MaxPeers:     DefaultMaxPeers(role),
		},
		API: APIConfig{Listen: "127.0.0.1:0"},
		Coordinator: CoordinatorConfig{
			CertificateValidity:    Duration{180 * 24 * time.Hour},
			CertificateRenewBefore: Duration{30 * 24 * time.Hour},
			ProbeInterval:          Duration{5 * time.Minute},
			HalfLife:               Duration{protocol.DefaultHalfLife},
			HostMinimum:            hostMinimumConfig(protocol.ListingMinimum),
			Review:                 ReviewConfig{BusinessDays: 3, Timezone: "UTC"},
		},
		Bench: BenchConfig{Interval: Duration{7 * 24 * time.Hour}, StorageMB: 256, NetworkMB: 16},
		Jobs: JobsConfig{
			ContainerdAddress:  "/run/containerd/containerd.sock",
			Namespace:          "gpunex",
			MaxImageMB:         10 << 10,
			MaxImageUnpackedMB: 64 << 10,
			Registries:         []string{"docker.io", "ghcr.io", "nvcr.io", "quay.io", "public.ecr.aws", "registry.k8s.io", "gcr.io", "mcr.microsoft.com"},
			ImageCacheGB:       100,
			Retention:          Duration{7 * 24 * time.Hour},
			MemoryMBPerGPU:     16 << 10,
			CPUMillisPerGPU:    4000,
			Pids:               1024,
			ScratchMB:          10 << 10,
			ProposalsPerMinute: 30,
			RequireEscrow:      true,
			CheckpointInterval: Duration{protocol.CheckpointInterval},
			UnmeteredStop:      Duration{5 * time.Minute},
			Egress:             protocol.EgressPublicOnly,
			NetworkSubnet:      "10.231.0.0/16",
			DNS:                []string{"1.1.1.1", "8.8.8.8"},
			UserNamespaces:     true,
		},
		Settlement: SettlementConfig{
			CommissionBPS:   1000,
			MinPayoutUSDC:   "10.00",
			TreasuryKeypair: "treasury.json",
			PayoutCheck:     Duration{time.Hour},
			MarketInterval:  Duration{time.Hour},
			MarketWindow:    Duration{7 * 24 * time.Hour},
			DisputeWindow:   Duration{24 * time.Hour},
		},
		Wallet: WalletConfig{Keypair: "wallet.json"},
		Alerts: AlertsConfig{ScoreBelow: 60, DiskFreeGB: 10, CertificateDays: 14},
		Offers: OffersConfig{
			TTL:           Duration{10 * time.Minute},
			Republish:     Duration{3 * time.Minute},
			SearchTimeout: Duration{3 * time.Second},
		},
	}
	if role == RoleProvider {
		c.Provider = ProviderConfig{
			Region:       "eu-west",
			Availability: AvailabilityConfig{Timezone: "UTC"},
			GPUs:         []GPUConfig{{Model: "L4-24GB", Count: 1, VRAMGB: 24, PriceUSDC: "0.45", Simulated: true}},
		}
	}
	return c
}

// LoadConfig reads and checks a config file. Fields absent from the file keep their defaults.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	var probe struct {
		Role string `toml:"role"`
	}
	if _, err := toml.Decode(string(b), &probe); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	c := Defaults(probe.Role)
	c.Provider.GPUs = nil // a provider lists its own GPUs
	md, err := toml.Decode(string(b), &c)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if n, ok := SolanaNetworks[c.Settlement.Network]; ok {
		// The preset fills what the file does not give.
		st := &c.Settlement
		for _, f := range []struct {
			key   string
			field *string
			value string
		}{{"rpc", &st.RPC, n.RPC}, {"cluster", &st.Cluster, n.Cluster}, {"mint", &st.Mint, n.Mint}} {
			if !md.IsDefined("settlement", f.key) || *f.field == "" {
				*f.field = f.value
			}
		}
	}
	if !md.IsDefined("coordinator", "certificate_renew_before") {
		// The default renews 30 days ahead, or a sixth of a shorter validity ahead.
		c.Coordinator.CertificateRenewBefore.Duration = min(c.Coordinator.CertificateRenewBefore.Duration, c.Coordinator.CertificateValidity.Duration/6)
	}
	if undec := md.Undecoded(); len(undec) > 0 {
		keys := make([]string, len(undec))
		var moved []string
		for i, k := range undec {
			keys[i] = k.String()
			if m, ok := MovedSettings[k.String()]; ok {
				moved = append(moved, fmt.Sprintf("%s moved to %s in gpunex %s", k, m.To, m.Since))
			}
		}
		if len(moved) > 0 {
			return Config{}, fmt.Errorf("%s: %s: rename it (see docs/config.md)", path, strings.Join(moved, "; "))
		}
		return Config{}, fmt.Errorf("%s: unknown settings: %s (see docs/config.md)", path, strings.Join(keys, ", "))
	}
	if err := c.Check(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Check validates the configuration and says what to fix.
func (c *Config) Check() error {
	var errs []error
	if !slices.Contains(Roles, c.Role) {
		errs = append(errs, fmt.Errorf("role %q: must be one of %s", c.Role, strings.Join(Roles, ", ")))
	}
	switch c.P2P.Reachability {
	case "", "auto", "public", "private":
	default:
		errs = append(errs, fmt.Errorf("p2p.reachability %q: auto, public or private", c.P2P.Reachability))
	}
	if r := c.P2P.Relay; r.Reservations <= 0 || r.CircuitsPerPeer <= 0 || r.CircuitDuration.Duration <= 0 || r.CircuitDataMB <= 0 {
		errs = append(errs, errors.New("p2p.relay: reservations, circuits_per_peer, circuit_duration and circuit_data_mb must each be above 0"))
	}
	if c.P2P.MaxPeers < 16 {
		errs = append(errs, fmt.Errorf("p2p.max_peers %d: at least 16", c.P2P.MaxPeers))
	}
	if c.Coordinator.ProbeInterval.Duration > protocol.ScoreTTL/4 {
		errs = append(errs, fmt.Errorf("coordinator.probe_interval %s: at most %s, so that score records are renewed before they expire", c.Coordinator.ProbeInterval.Duration, protocol.ScoreTTL/4))
	}
	for _, a := range c.P2P.Listen {
		if _, err := ma.NewMultiaddr(a); err != nil {
			errs = append(errs, fmt.Errorf("p2p.listen %q: %v", a, err))
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.Log.Level)); err != nil {
		errs = append(errs, fmt.Errorf("log.level %q: use debug, info, warn or error", c.Log.Level))
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		errs = append(errs, fmt.Errorf("log.format %q: use text or json", c.Log.Format))
	}
	if err := CheckLoopback(c.API.Listen); err != nil {
		errs = append(errs, fmt.Errorf("api.listen: %w", err))
	}
	if _, err := c.BootstrapPeers(); err != nil {
		errs = append(errs, err)
	}
	if c.Offers.TTL.Duration < 10*time.Second || c.Offers.TTL.Duration > protocol.MaxOfferTTL {
		errs = append(errs, fmt.Errorf("offers.ttl %s: must be between 10s and %s", c.Offers.TTL, protocol.MaxOfferTTL))
	}
	if c.Offers.Republish.Duration <= 0 || c.Offers.Republish.Duration > c.Offers.TTL.Duration/2 {
		errs = append(errs, fmt.Errorf("offers.republish %s: must be positive and at most half of offers.ttl (%s)", c.Offers.Republish, c.Offers.TTL))
	}
	if c.Offers.SearchTimeout.Duration <= 0 {
		errs = append(errs, errors.New("offers.search_timeout must be positive"))
	}
	if _, err := c.TrustedCoordinators(); err != nil {
		errs = append(errs, err)
	}
	if c.Coordinator.ProbeInterval.Duration < 100*time.Millisecond || c.Coordinator.HalfLife.Duration < time.Minute {
		errs = append(errs, errors.New("coordinator.probe_interval must be at least 100ms and coordinator.half_life at least 1m"))
	}
	if m := c.Coordinator.HostMinimum; m.UpMbps < 0 || m.DownMbps < 0 || m.MaxRTTMilli <= 0 || m.StorageWriteMBps < 0 || m.StorageReadMBps < 0 || m.StorageIOPS < 0 || m.EnterpriseMbps < 0 ||
		max(m.UpMbps, m.DownMbps, m.MaxRTTMilli, m.StorageWriteMBps, m.StorageReadMBps, m.StorageIOPS, m.EnterpriseMbps) > 1e7 {
		errs = append(errs, errors.New("coordinator.host_minimum: figures from 0 to 10,000,000, and max_rtt_ms above 0"))
	}
	if g := c.Coordinator.HostMinimum.EnterpriseGrace.Duration; g < 0 || g > 365*24*time.Hour {
		errs = append(errs, errors.New("coordinator.host_minimum.enterprise_grace: from 0 (never move a tier down) to 8760h"))
	}
	if r := c.Coordinator.Review; r.BusinessDays < 1 || r.BusinessDays > 30 {
		errs = append(errs, fmt.Errorf("coordinator.review.business_days %d: from 1 to 30", r.BusinessDays))
	}
	if _, err := time.LoadLocation(c.Coordinator.Review.Timezone); err != nil {
		errs = append(errs, fmt.Errorf("coordinator.review.timezone %q: an IANA time zone such as Europe/Paris (%v)", c.Coordinator.Review.Timezone, err))
	}
	for _, h := range c.Coordinator.Review.Holidays {
		if _, err := time.Parse(time.DateOnly, h); err != nil {
			errs = append(errs, fmt.Errorf("coordinator.review.holidays: %q is not a YYYY-MM-DD date", h))
		}
	}
	if e := c.Coordinator.Review.RemindEmail; e != "" && !strings.Contains(e, "@") {
		errs = append(errs, fmt.Errorf("coordinator.review.remind_email %q: an e-mail address", e))
	}
	if v := c.Coordinator.CertificateValidity.Duration; v < time.Minute || v > protocol.MaxCertificateValidity {
		errs = append(errs, fmt.Errorf("coordinator.certificate_validity %s: must be between 1m and %s", c.Coordinator.CertificateValidity, protocol.MaxCertificateValidity))
	}
	if r := c.Coordinator.CertificateRenewBefore.Duration; r < 0 || (r > 0 && r >= c.Coordinator.CertificateValidity.Duration) {
		errs = append(errs, fmt.Errorf("coordinator.certificate_renew_before %s: must be 0 (no automatic renewal) or shorter than coordinator.certificate_validity (%s)", c.Coordinator.CertificateRenewBefore, c.Coordinator.CertificateValidity))
	}
	if b := c.Bench; b.Interval.Duration < time.Minute || b.Interval.Duration > protocol.MaxAttestationAge-24*time.Hour || b.StorageMB < 1 || b.NetworkMB < 1 || b.NetworkMB > protocol.MaxBenchTransfer>>20 || b.SimulatedUploadMbps < 0 {
		errs = append(errs, fmt.Errorf("bench: interval between 1m and %s, storage_mb at least 1, network_mb 1-%d, simulated_upload_mbps not negative", protocol.MaxAttestationAge-24*time.Hour, protocol.MaxBenchTransfer>>20))
	}
	j := c.Jobs
	if j.MaxImageMB < 1 || j.MemoryMBPerGPU < 16 || j.CPUMillisPerGPU < 100 || j.Pids < 16 || j.ScratchMB < 1 || j.ProposalsPerMinute < 1 {
		errs = append(errs, errors.New("jobs: max_image_mb, scratch_mb and proposals_per_minute must be at least 1, memory_mb_per_gpu 16, cpu_millis_per_gpu 100, pids 16"))
	}
	if ci := j.CheckpointInterval.Duration; ci < time.Second || ci > protocol.CheckpointInterval {
		errs = append(errs, fmt.Errorf("jobs.checkpoint_interval %s: must be between 1s and %s", j.CheckpointInterval, protocol.CheckpointInterval))
	}
	if j.MaxImageUnpackedMB <= 0 || j.ImageCacheGB <= 0 {
		errs = append(errs, fmt.Errorf("jobs.max_image_unpacked_mb and jobs.image_cache_gb must be > 0"))
	}
	if j.Retention.Duration < time.Hour {
		errs = append(errs, fmt.Errorf("jobs.retention %s: at least 1h (renters fetch their output after the job)", j.Retention))
	}
	if !protocol.ValidEgress(j.Egress) {
		errs = append(errs, fmt.Errorf("jobs.egress %q: use %q, %q or %q", j.Egress, protocol.EgressDeny, protocol.EgressPublicOnly, protocol.EgressAllow))
	}
	if j.EgressMbps < 0 {
		errs = append(errs, fmt.Errorf("jobs.egress_mbps %d: 0 (no cap) or more", j.EgressMbps))
	}
	if p, err := netip.ParsePrefix(j.NetworkSubnet); err != nil || !p.Addr().Is4() || p.Bits() > 28 || p.Masked() != p {
		errs = append(errs, fmt.Errorf("jobs.network_subnet %q: an IPv4 network such as 10.231.0.0/16, at most /28", j.NetworkSubnet))
	}
	for _, d := range j.DNS {
		if _, err := netip.ParseAddr(d); err != nil {
			errs = append(errs, fmt.Errorf("jobs.dns: %q is not an IP address", d))
		}
	}
	if u := j.UnmeteredStop.Duration; u != 0 && u < 5*time.Second {
		errs = append(errs, fmt.Errorf("jobs.unmetered_stop %s: 0 (never) or at least 5s (below %s it stops the jobs of renters countersigning at the slowest pace allowed, once a minute)", j.UnmeteredStop, 2*protocol.CheckpointInterval))
	}
	for _, r := range j.BlockedRenters {
		if _, err := peer.Decode(r); err != nil {
			errs = append(errs, fmt.Errorf("jobs.blocked_renters %q: not a peer ID", r))
		}
	}
	st := c.Settlement
	if st.CommissionBPS < 0 || st.CommissionBPS > protocol.MaxCommissionBPS {
		errs = append(errs, fmt.Errorf("settlement.commission_bps %d: must be between 0 and %d", st.CommissionBPS, protocol.MaxCommissionBPS))
	}
	if _, err := protocol.ParseUSDC(st.MinPayoutUSDC); err != nil {
		errs = append(errs, fmt.Errorf("settlement.min_payout_usdc: %w", err))
	}
	if st.Mint != "" && !protocol.ValidSolanaAddress(st.Mint) {
		errs = append(errs, fmt.Errorf("settlement.mint %q: not a Solana address", st.Mint))
	}
	if _, ok := SolanaNetworks[st.Network]; st.Network != "" && !ok {
		errs = append(errs, fmt.Errorf("settlement.network %q: devnet, mainnet-beta, or empty (rpc, cluster and mint given one by one)", st.Network))
	}
	if st.DisputeWindow.Duration < time.Second {
		errs = append(errs, fmt.Errorf("settlement.dispute_window %s: must be at least 1s", st.DisputeWindow))
	}
	if st.PayoutCheck.Duration < time.Second || st.MarketInterval.Duration < time.Second || st.MarketWindow.Duration < time.Minute {
		errs = append(errs, errors.New("settlement: payout_check and market_interval must be at least 1s, market_window at least 1m"))
	}
	if s := c.Payout.Settings(); s != nil {
		if err := s.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("payout.%w", err))
		}
	}
	if c.Role == RoleProvider {
		if _, err := c.Provider.Schedule(); err != nil {
			errs = append(errs, fmt.Errorf("provider.availability: %w", err))
		}
		if _, err := c.Provider.Items(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

// checkLoopback accepts a host:port whose host is a loopback address: the API is local.
func CheckLoopback(listen string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("%q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%q: the API listens on loopback only (127.0.0.1 or ::1)", listen)
	}
	return nil
}
