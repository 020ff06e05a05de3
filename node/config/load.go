package config

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/gpunex/gpunex/protocol"
)

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
			MaxTunnels:         64,
			TunnelGBPerJob:     100,
			TunnelsPerMinute:   600,
			RequireEscrow:      true,
			CheckpointInterval: Duration{protocol.CheckpointInterval},
			// One missed checkpoint at the slowest pace allowed, with the meter's tolerance:
			// past its last checkpoint, a renter pays at most one interval.
			UnmeteredStop:      Duration{protocol.CheckpointInterval + protocol.CheckpointAllowance + protocol.MeterTolerance},
			UnmeteredRenterBan: Duration{24 * time.Hour},
			Egress:             protocol.EgressPublicOnly,
			NetworkSubnet:      "10.231.0.0/16",
			DNS:                []string{"1.1.1.1", "8.8.8.8"},
			UserNamespaces:     true,
			MaxInputMB:         50 << 10,
			InputCacheGB:       100,
			MaxExecs:           4,
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
		Payout: PayoutConfig{ChangeDelay: Duration{24 * time.Hour}},
		Alerts: AlertsConfig{ScoreBelow: 60, DiskFreeGB: 10, CertificateDays: 14},
		Offers: OffersConfig{
			TTL:           Duration{10 * time.Minute},
			Republish:     Duration{3 * time.Minute},
			SearchTimeout: Duration{3 * time.Second},
			WarmSearch:    Duration{500 * time.Millisecond},
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
