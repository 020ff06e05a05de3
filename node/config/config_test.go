package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigCheckSaysWhatToFix(t *testing.T) {
	cases := map[string]struct {
		edit func(*Config)
		want string
	}{
		"bad role":          {func(c *Config) { c.Role = "miner" }, `role "miner"`},
		"bad log level":     {func(c *Config) { c.Log.Level = "loud" }, "log.level"},
		"bad log format":    {func(c *Config) { c.Log.Format = "xml" }, "log.format"},
		"public API":        {func(c *Config) { c.API.Listen = "0.0.0.0:8080" }, "loopback only"},
		"bad listen":        {func(c *Config) { c.P2P.Listen = []string{"tcp/4001"} }, "p2p.listen"},
		"bootstrap no peer": {func(c *Config) { c.P2P.Bootstrap = []string{"/ip4/1.2.3.4/tcp/4001"} }, "p2p.bootstrap"},
		"republish > ttl/2": {func(c *Config) { c.Offers.Republish.Duration = c.Offers.TTL.Duration }, "offers.republish"},
		"no GPUs":           {func(c *Config) { c.Provider.GPUs = nil }, "provider.gpus"},
		"bad price":         {func(c *Config) { c.Provider.GPUs[0].PriceUSDC = "2,10" }, "price_usdc"},
		"zero count":        {func(c *Config) { c.Provider.GPUs[0].Count = 0 }, "count 0"},
		"bad window":        {func(c *Config) { c.Provider.Availability.Windows = []string{"mon 25:00-26:00"} }, "provider.availability"},
		"bad zone":          {func(c *Config) { c.Provider.Availability.Timezone = "Mars/Olympus" }, "provider.availability"},
		"IPv6 egress block": {func(c *Config) { c.Jobs.EgressBlocked = []string{"2001:db8::/32"} }, "jobs.egress_blocked"},
		"bad egress block":  {func(c *Config) { c.Jobs.EgressBlocked = []string{"10.0.0.0/8", "intranet"} }, `jobs.egress_blocked "intranet"`},
		"no tunnel rate":    {func(c *Config) { c.Jobs.TunnelsPerMinute = 0 }, "tunnels_per_minute"},
		"clock a day off":   {func(c *Config) { c.Debug.ClockOffset.Duration = -24 * time.Hour }, "debug.clock_offset"},
	}
	for name, c := range cases {
		cfg := Defaults(RoleProvider)
		c.edit(&cfg)
		err := cfg.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v; want one mentioning %q", name, err, c.want)
		}
	}
	for _, role := range Roles {
		cfg := Defaults(role)
		if err := cfg.Check(); err != nil {
			t.Errorf("defaults of %s do not pass: %v", role, err)
		}
	}
}

func TestLoadConfigRejectsUnknownSettings(t *testing.T) {
	dir := t.TempDir()
	h, _, err := Init(dir, InitOptions{Role: RoleRenter})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(h.Path(ConfigFile))
	os.WriteFile(h.Path(ConfigFile), append(b, []byte("\n[offers]\nttl_typo = \"1m\"\n")...), 0o644)
	if _, err := h.Config(); err == nil {
		// A duplicate [offers] table is itself an error; try a fresh key in a new table.
		t.Fatal("config with a duplicate table loaded")
	}
	os.WriteFile(filepath.Join(dir, ConfigFile), append(b, []byte("\n[gpu]\nsimulate = true\n")...), 0o644)
	if _, err := h.Config(); err == nil || !strings.Contains(err.Error(), "unknown settings: gpu") {
		t.Fatalf("unknown setting: %v", err)
	}
}

func TestIdentityRefusesOpenPermissions(t *testing.T) {
	h, _, err := Init(t.TempDir(), InitOptions{Role: RoleRenter})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Identity(); err != nil {
		t.Fatal(err)
	}
	os.Chmod(h.Path(IdentityFile), 0o644)
	if _, err := h.Identity(); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key accepted: %v", err)
	}
}

// TestRenewBeforeDefault: a coordinator whose config predates certificate_renew_before, with
// a short validity, still starts: the default shrinks to a sixth of the validity; a value
// set by hand that is not shorter than the validity is an error naming both settings.
func TestRenewBeforeDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(path, []byte("role = \"coordinator\"\n[coordinator]\ncertificate_validity = \"240h\"\n"), 0o600)
	c, err := LoadConfig(path)
	if err != nil || c.Coordinator.CertificateRenewBefore.Duration != 40*time.Hour {
		t.Fatalf("renew_before %s, %v", c.Coordinator.CertificateRenewBefore, err)
	}
	os.WriteFile(path, []byte("role = \"coordinator\"\n[coordinator]\ncertificate_validity = \"240h\"\ncertificate_renew_before = \"240h\"\n"), 0o600)
	if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), "certificate_renew_before") || !strings.Contains(err.Error(), "certificate_validity") {
		t.Fatalf("renew_before as long as the validity: %v", err)
	}
}

// TestFailedInitLeavesNothing: an init whose settings do not hold creates no home.
func TestFailedInitLeavesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home")
	if _, _, err := Init(dir, InitOptions{Role: RoleRenter, Bootstrap: []string{"/ip4/1.2.3.4/tcp/4001"}}); err == nil {
		t.Fatal("init with a bootstrap address without a peer ID succeeded")
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed init left %s behind: %v", dir, err)
	}
}

// TestSolanaNetworkPreset: one line moves a coordinator to a real cluster: the preset fills
// the endpoint, genesis hash and USDC mint the file leaves empty, and keeps what it gives.
func TestSolanaNetworkPreset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(path, []byte("role = \"coordinator\"\n[settlement]\nnetwork = \"mainnet-beta\"\nrpc = \"\"\nmint = \"\"\n"), 0o600)
	c, err := LoadConfig(path)
	if err != nil || c.Settlement.RPC != "https://api.mainnet-beta.solana.com" || c.Settlement.Mint != "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v" ||
		c.Settlement.Cluster != "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d" {
		t.Fatalf("mainnet-beta: %+v %v", c.Settlement, err)
	}
	os.WriteFile(path, []byte("role = \"coordinator\"\n[settlement]\nnetwork = \"devnet\"\nrpc = \"https://archive.example.org\"\n"), 0o600)
	if c, err := LoadConfig(path); err != nil || c.Settlement.RPC != "https://archive.example.org" || c.Settlement.Mint != "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU" {
		t.Fatalf("devnet with an archival endpoint: %+v %v", c.Settlement, err)
	}
	os.WriteFile(path, []byte("role = \"coordinator\"\n[settlement]\nnetwork = \"testnet\"\n"), 0o600)
	if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), "settlement.network") {
		t.Fatalf("an unknown network: %v", err)
	}
}

// TestBootstrapPeersMerged: the TCP and QUIC addresses of one coordinator make one peer to
// dial, so that libp2p ranks them together; another coordinator stays apart.
func TestBootstrapPeersMerged(t *testing.T) {
	var c Config
	a, b := "12D3KooWJJ1B8jMAbGMgwiBCtRV8cfjuFBUz7dX4gszDJXhg6jZZ", "12D3KooWGSS9M1VipBMoitFQLFgC3dd8CK4VyhtagMya4vRLGbWz"
	c.P2P.Bootstrap = []string{"/ip4/203.0.113.7/tcp/4001/p2p/" + a, "/ip4/203.0.113.8/tcp/4001/p2p/" + b, "/ip4/203.0.113.7/udp/4001/quic-v1/p2p/" + a}
	peers, err := c.BootstrapPeers()
	if err != nil || len(peers) != 2 || peers[0].ID.String() != a || len(peers[0].Addrs) != 2 || peers[1].ID.String() != b || len(peers[1].Addrs) != 1 {
		t.Fatalf("%v %v", peers, err)
	}
}

// TestClockOffsetWrittenBack: a clock offset written into a home (the soak's clock fault)
// reads back as written, and a home without one has no [debug] table at all.
func TestClockOffsetWrittenBack(t *testing.T) {
	h, _, err := Init(t.TempDir(), InitOptions{Role: RoleRenter})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(h.Path(ConfigFile)); strings.Contains(string(b), "[debug]") {
		t.Fatalf("init wrote a [debug] table:\n%s", b)
	}
	cfg, err := h.Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Debug.ClockOffset.Duration = -3 * time.Minute
	if err := h.WriteConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if cfg, err = h.Config(); err != nil || cfg.Debug.ClockOffset.Duration != -3*time.Minute {
		t.Fatalf("read back %v, %v; want -3m", cfg.Debug.ClockOffset, err)
	}
	cfg.Debug.ClockOffset.Duration = 0
	if err := h.WriteConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(h.Path(ConfigFile)); strings.Contains(string(b), "clock_offset") {
		t.Fatalf("an offset of 0 still written:\n%s", b)
	}
}
