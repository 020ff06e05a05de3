package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Home is a node's directory: config.toml, identity.key, api.token, data/ and, while the
// daemon runs, api.addr.
type Home struct{ Dir string }

// File names inside a home.
const (
	ConfigFile   = "config.toml"
	IdentityFile = "identity.key"
	TokenFile    = "api.token"
	APIAddrFile  = "api.addr"
	DataDir      = "data"
)

// Path returns the path of a file inside the home.
func (h Home) Path(name string) string { return filepath.Join(h.Dir, name) }

// InitOptions tune a new home.
type InitOptions struct {
	Role string
	// Version is the gpunex version writing the home (recorded in home.json).
	Version string
	// Overrides, applied to the defaults before config.toml is written (devnet uses them).
	Listen    []string
	Bootstrap []string
	Region    string
	GPUs      []GPUConfig
	Windows   []string
	Timezone  string
	OfferTTL  string
	Republish string
	Force     bool
	// ContainerdAddress sets jobs.containerd_address.
	ContainerdAddress string
	// BenchStorageMB and BenchNetworkMB set bench.storage_mb and bench.network_mb.
	BenchStorageMB, BenchNetworkMB int64
	// ProbeInterval and HalfLife set coordinator.probe_interval and coordinator.half_life.
	ProbeInterval, HalfLife time.Duration
	// CheckpointInterval sets jobs.checkpoint_interval.
	CheckpointInterval time.Duration
	// EnterpriseLinkMbps sets coordinator.host_minimum.enterprise_mbps.
	EnterpriseLinkMbps float64
}

// ErrHomeExists is returned by Init when the home already holds an identity.
var ErrHomeExists = errors.New("home already initialised")

// Init creates a home: a commented config.toml with defaults, an Ed25519 identity key and
// an API token (both 0600), and the data directory.
func Init(dir string, o InitOptions) (_ Home, _ peer.ID, err error) {
	h := Home{Dir: dir}
	if o.Role == "" {
		return h, "", fmt.Errorf("a role is required: one of %s", strings.Join(Roles, ", "))
	}
	if _, err := os.Stat(h.Path(IdentityFile)); err == nil && !o.Force {
		return h, "", fmt.Errorf("%w: %s holds %s", ErrHomeExists, dir, IdentityFile)
	}
	c := Defaults(o.Role)
	if o.Listen != nil {
		c.P2P.Listen = o.Listen
	}
	c.P2P.Bootstrap = o.Bootstrap
	if o.Role != RoleCoordinator {
		// The bootstrap peers are the network's coordinators: trust them.
		peers, err := c.BootstrapPeers()
		if err != nil {
			return h, "", err
		}
		for _, p := range peers {
			if !slices.Contains(c.Trust.Coordinators, p.ID.String()) { // in order, once each
				c.Trust.Coordinators = append(c.Trust.Coordinators, p.ID.String())
			}
		}
	}
	if o.Region != "" {
		c.Provider.Region = o.Region
	}
	if o.ContainerdAddress != "" {
		c.Jobs.ContainerdAddress = o.ContainerdAddress
	}
	if o.ProbeInterval > 0 {
		c.Coordinator.ProbeInterval = Duration{o.ProbeInterval}
	}
	if o.CheckpointInterval > 0 {
		c.Jobs.CheckpointInterval = Duration{o.CheckpointInterval}
	}
	if o.HalfLife > 0 {
		c.Coordinator.HalfLife = Duration{o.HalfLife}
	}
	if o.EnterpriseLinkMbps > 0 {
		c.Coordinator.HostMinimum.EnterpriseMbps = o.EnterpriseLinkMbps
	}
	if o.BenchStorageMB > 0 {
		c.Bench.StorageMB = o.BenchStorageMB
	}
	if o.BenchNetworkMB > 0 {
		c.Bench.NetworkMB = o.BenchNetworkMB
	}
	if o.GPUs != nil {
		c.Provider.GPUs = o.GPUs
	}
	if o.Windows != nil {
		c.Provider.Availability.Windows = o.Windows
	}
	if o.Timezone != "" {
		c.Provider.Availability.Timezone = o.Timezone
	}
	if o.OfferTTL != "" {
		if err := c.Offers.TTL.UnmarshalText([]byte(o.OfferTTL)); err != nil {
			return h, "", err
		}
	}
	if o.Republish != "" {
		if err := c.Offers.Republish.UnmarshalText([]byte(o.Republish)); err != nil {
			return h, "", err
		}
	}
	if err := c.Check(); err != nil {
		return h, "", err
	}
	// Nothing is written before the settings hold; a home this call creates is removed
	// again if a later step fails, so that a failed init leaves nothing behind.
	if _, statErr := os.Stat(dir); errors.Is(statErr, fs.ErrNotExist) {
		defer func() {
			if err != nil {
				os.RemoveAll(dir)
			}
		}()
	}
	if err := os.MkdirAll(h.Path(DataDir), 0o700); err != nil {
		return h, "", fmt.Errorf("create home: %w", err)
	}
	if err := h.WriteConfig(c); err != nil {
		return h, "", err
	}
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return h, "", err
	}
	kb, err := crypto.MarshalPrivateKey(sk)
	if err != nil {
		return h, "", err
	}
	if err := WriteFileAtomic(h.Path(IdentityFile), kb, 0o600); err != nil {
		return h, "", err
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return h, "", err
	}
	if err := WriteFileAtomic(h.Path(TokenFile), []byte(hex.EncodeToString(tok)+"\n"), 0o600); err != nil {
		return h, "", err
	}
	if err := h.WriteFormat(o.Version); err != nil {
		return h, "", err
	}
	id, _ := peer.IDFromPrivateKey(sk)
	return h, id, nil
}

// Config loads config.toml.
func (h Home) Config() (Config, error) { return LoadConfig(h.Path(ConfigFile)) }

// WriteConfig writes config.toml with comments.
func (h Home) WriteConfig(c Config) error {
	var b strings.Builder
	if err := configTemplate.Execute(&b, c); err != nil {
		return err
	}
	// The written file must load back to the same configuration.
	return WriteFileAtomic(h.Path(ConfigFile), []byte(b.String()), 0o644)
}

// Identity loads the node's private key, refusing a key file others can read.
func (h Home) Identity() (crypto.PrivKey, error) {
	p := h.Path(IdentityFile)
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("identity: %w (run `gpunex init --home %s` first)", err, h.Dir)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("identity: %s is readable by others (mode %o); run chmod 600 on it", p, st.Mode().Perm())
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	sk, err := crypto.UnmarshalPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("identity: %s is not a libp2p private key: %w", p, err)
	}
	return sk, nil
}

// Token loads the API token.
func (h Home) Token() (string, error) {
	b, err := os.ReadFile(h.Path(TokenFile))
	if err != nil {
		return "", fmt.Errorf("API token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if len(t) < 32 {
		return "", fmt.Errorf("API token in %s is too short", h.Path(TokenFile))
	}
	return t, nil
}

// WriteFileAtomic writes a file of the home (or the devnet's devnet.json) in one step: a reader
// sees the old content or the new one, never a part.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

var configTemplate = template.Must(template.New("config").Funcs(template.FuncMap{
	"list": func(xs []string) string {
		q := make([]string, len(xs))
		for i, x := range xs {
			q[i] = fmt.Sprintf("%q", x)
		}
		return "[" + strings.Join(q, ", ") + "]"
	},
}).Parse(`# gpunex node configuration. Every setting is described in docs/config.md.

# provider | renter | coordinator
role = "{{.Role}}"

[log]
# debug | info | warn | error. Logs go to stderr.
level = "{{.Log.Level}}"
# text | json
format = "{{.Log.Format}}"
{{if .Debug.ClockOffset.Duration}}
[debug]
# Tests only (docs/config.md): the node's clock reads the system clock plus this offset.
clock_offset = "{{.Debug.ClockOffset}}"
{{end}}
[p2p]
# Multiaddrs the libp2p host listens on (TCP and QUIC).
listen = {{list .P2P.Listen}}
# Coordinators to join the network through: multiaddrs ending in /p2p/<peer ID>.
bootstrap = {{list .P2P.Bootstrap}}

[api]
# The local JSON API (bearer token in api.token). Loopback only; port 0 picks a free port,
# written to api.addr while the daemon runs.
listen = "{{.API.Listen}}"

[offers]
# How long each announced offer stays valid if its provider goes silent.
ttl = "{{.Offers.TTL}}"
# How often a provider re-announces its offer (at most half of ttl).
republish = "{{.Offers.Republish}}"
# How long a search waits for DHT answers.
search_timeout = "{{.Offers.SearchTimeout}}"
# How long a search waits for the DHT when this node's offer book follows gossip (it
# already holds the network's offers): what the DHT adds later is there for the next one.
warm_search = "{{.Offers.WarmSearch}}"
# A renter follows the offers of these GPU models by gossip (empty: every model of its
# coordinators' catalogues), e.g. models = ["H100-80GB", "L40S-48GB"].
# models = []

[trust]
# Peer IDs of the coordinators whose certificates this node accepts: offers without a
# valid certificate from one of them are refused. ` + "`gpunex init --bootstrap`" + ` fills it with
# the bootstrap peers. A coordinator always trusts itself.
coordinators = {{list .Trust.Coordinators}}
{{if eq .Role "coordinator"}}
[coordinator]
# How long a certificate is valid after approval (at most 8784h, 366 days).
certificate_validity = "{{.Coordinator.CertificateValidity}}"
# Certificates of approved providers that were not revoked are renewed this long before
# they expire ("0s": never; providers then apply again).
certificate_renew_before = "{{.Coordinator.CertificateRenewBefore}}"
# Mean time between uptime probes of each certified provider (random moments around it).
probe_interval = "{{.Coordinator.ProbeInterval}}"
# Half-life of the reliability score's components.
half_life = "{{.Coordinator.HalfLife}}"

[coordinator.notify]
# Decisions are also sent to the applicant by e-mail and to a webhook, when set.
smtp_addr = "{{.Coordinator.Notify.SMTPAddr}}"
smtp_from = "{{.Coordinator.Notify.SMTPFrom}}"
smtp_username = "{{.Coordinator.Notify.SMTPUsername}}"
# A file holding the SMTP password, mode 0600.
smtp_password_file = "{{.Coordinator.Notify.SMTPPasswordFile}}"
# Receives a JSON POST per decision, signed with HMAC-SHA256 when a secret file is set.
webhook_url = "{{.Coordinator.Notify.WebhookURL}}"
webhook_secret_file = "{{.Coordinator.Notify.WebhookSecretFile}}"

[coordinator.review]
# A decision is due this many business days (Monday to Friday, less holidays, in timezone)
# after an application, or after the applicant's answer to a question; the reviewers are
# reminded when it is due within a business day and when it is overdue.
business_days = {{.Coordinator.Review.BusinessDays}}
timezone = "{{.Coordinator.Review.Timezone}}"
holidays = [{{range $i, $h := .Coordinator.Review.Holidays}}{{if $i}}, {{end}}"{{$h}}"{{end}}]
# The reviewers' address for reminders (the webhook of [coordinator.notify] gets them too).
remind_email = "{{.Coordinator.Review.RemindEmail}}"

[coordinator.host_minimum]
# The listing minimum this coordinator holds its providers' links (as it measures them in
# their benchmark runs) and jobs folders to; signed into each run's network receipt. Under
# it a provider is delisted until a run passes (docs/benchmarks.md, "Host minimums").
up_mbps = {{.Coordinator.HostMinimum.UpMbps}}
down_mbps = {{.Coordinator.HostMinimum.DownMbps}}
max_rtt_ms = {{.Coordinator.HostMinimum.MaxRTTMilli}}
storage_write_mbps = {{.Coordinator.HostMinimum.StorageWriteMBps}}
storage_read_mbps = {{.Coordinator.HostMinimum.StorageReadMBps}}
storage_iops = {{.Coordinator.HostMinimum.StorageIOPS}}
# The link, each way, this coordinator must have measured (Mbit/s) to approve Enterprise,
# once it measured the applicant's link at all.
enterprise_mbps = {{.Coordinator.HostMinimum.EnterpriseMbps}}

[settlement]
# A Solana cluster, "devnet" or "mainnet-beta", fills rpc, cluster and mint where they are
# empty: moving from the local runtime to a real cluster is this one line (give your own
# rpc with archival history in production: the public endpoints are rate limited).
network = "{{.Settlement.Network}}"
# Solana JSON-RPC endpoint, expected genesis hash (empty: not checked) and USDC mint
# (mainnet EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v, devnet 4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU).
rpc = "{{.Settlement.RPC}}"
cluster = "{{.Settlement.Cluster}}"
mint = "{{.Settlement.Mint}}"
# The treasury's Solana keypair (Solana CLI JSON, mode 0600), relative to this folder.
treasury_keypair = "{{.Settlement.TreasuryKeypair}}"
# Commission on each charge, in basis points (1000 = 10%), shown to everyone.
commission_bps = {{.Settlement.CommissionBPS}}
# Least pending amount a scheduled payout pays.
min_payout_usdc = "{{.Settlement.MinPayoutUSDC}}"
# How often due payouts and expired holds are checked; how often market statistics are
# published and the period they cover.
payout_check = "{{.Settlement.PayoutCheck}}"
market_interval = "{{.Settlement.MarketInterval}}"
market_window = "{{.Settlement.MarketWindow}}"
# How long a final receipt the renter did not countersign waits for a dispute before it
# is charged: at most the renter's last countersigned checkpoint plus one minute.
dispute_window = "{{.Settlement.DisputeWindow}}"
# The coordinator's bank account, debtor of bank-transfer payout files (pain.001).
bank_account_name = "{{.Settlement.BankAccountName}}"
bank_iban = "{{.Settlement.BankIBAN}}"
bank_bic = "{{.Settlement.BankBIC}}"
{{end}}
[wallet]
# This node's Solana wallet (renters deposit from it): RPC endpoint and keypair file
# (created by ` + "`gpunex wallet init`" + `, mode 0600, relative to this folder).
rpc = "{{.Wallet.RPC}}"
keypair = "{{.Wallet.Keypair}}"
{{if ne .Role "provider"}}
[jobs]
# How often to ask the provider of each job this node rents for a usage checkpoint and
# countersign it (at most 1m): a provider stops a job whose renter stopped countersigning.
checkpoint_interval = "{{.Jobs.CheckpointInterval}}"
{{end}}{{if eq .Role "provider"}}
[provider]
# Where the GPUs are (free text, lower case): renters filter on it.
region = "{{.Provider.Region}}"

[provider.availability]
# IANA time zone of the windows below.
timezone = "{{.Provider.Availability.Timezone}}"
# Weekly windows during which the GPUs are offered, e.g. ["mon-fri 08:00-20:00", "sat 10:00-14:00"].
# Empty means 24/7. Outside the windows the offer is withdrawn.
windows = {{list .Provider.Availability.Windows}}

[bench]
# How often the benchmarks run (they also run after a driver change and when the
# coordinator sends a challenge). Attestations older than 8 days are no longer accepted.
interval = "{{.Bench.Interval}}"
# MB written and read by the storage benchmark, and sent each way by the network one.
storage_mb = {{.Bench.StorageMB}}
network_mb = {{.Bench.NetworkMB}}

[jobs]
# The containerd socket jobs run through (Debian: apt-get install containerd runc).
containerd_address = "{{.Jobs.ContainerdAddress}}"
# containerd namespace of gpunex's containers and images.
namespace = "{{.Jobs.Namespace}}"
# Largest image archive a renter may send, or image layers pulled, in MB.
max_image_mb = {{.Jobs.MaxImageMB}}
# Largest an image may be once unpacked, in MB (checked before unpacking).
max_image_unpacked_mb = {{.Jobs.MaxImageUnpackedMB}}
# Registries images may be pulled from (public addresses only, unless private_registries).
registries = {{list .Jobs.Registries}}
private_registries = {{.Jobs.PrivateRegistries}}
# Disk kept for images of later jobs, in GB (least recently used deleted first).
image_cache_gb = {{.Jobs.ImageCacheGB}}
# How long an ended job's log and output stay for its renter to fetch.
retention = "{{.Jobs.Retention}}"
# Largest input (gpunex job run --input) a job may bring, in MB, stated in the offer; 0
# takes none (and keeps the offer readable by nodes older than inputs).
max_input_mb = {{.Jobs.MaxInputMB}}
# Disk kept for renters' input chunks between their jobs, in GB (at least max_input_mb;
# the least recently used deleted first, and every chunk unused for the retention period).
input_cache_gb = {{.Jobs.InputCacheGB}}
# What a job gets per allocated GPU.
memory_mb_per_gpu = {{.Jobs.MemoryMBPerGPU}}
cpu_millis_per_gpu = {{.Jobs.CPUMillisPerGPU}}
# Per job: most processes, and size of its writable /scratch, /tmp and /output.
pids = {{.Jobs.Pids}}
scratch_mb = {{.Jobs.ScratchMB}}
# Renters (peer IDs) whose proposals are refused.
blocked_renters = {{list .Jobs.BlockedRenters}}
# Most proposals taken from one peer per minute.
proposals_per_minute = {{.Jobs.ProposalsPerMinute}}
# The ports jobs declare reach their renter only, through the peer-to-peer link: most
# connections open at once per job (0: none), GB a job's connections carry in all (0: no
# bound), connections one peer opens per minute.
max_tunnels = {{.Jobs.MaxTunnels}}
tunnel_gb_per_job = {{.Jobs.TunnelGBPerJob}}
tunnels_per_minute = {{.Jobs.TunnelsPerMinute}}
# Start a job only against the coordinator's escrow hold covering its maximum cost.
require_escrow = {{.Jobs.RequireEscrow}}
# Stop a job whose renter has countersigned no usage checkpoint for this long ("0s":
# never): what the renter did not countersign is paid only up to one minute past its last
# checkpoint.
unmetered_stop = "{{.Jobs.UnmeteredStop}}"
# Refuse for this long the proposals of a renter one of whose jobs was stopped that way
# ("0s": never).
unmetered_renter_ban = "{{.Jobs.UnmeteredRenterBan}}"
# As a renter: how often to ask for and countersign a checkpoint of each running job
# (at most 1m).
checkpoint_interval = "{{.Jobs.CheckpointInterval}}"
# What a job with egress reaches: "deny" (no network), "public-only" (public addresses,
# through NAT) or "allow" (also your private networks). Never this host, other jobs or
# cloud metadata. Needs containernetworking-plugins and iptables.
egress = "{{.Jobs.Egress}}"
# Each job's bandwidth cap in Mbit/s, each way (0: none).
egress_mbps = {{.Jobs.EgressMbps}}
# The jobs' own IPv4 network (NAT to the outside), and their nameservers.
network_subnet = "{{.Jobs.NetworkSubnet}}"
dns = {{list .Jobs.DNS}}
# Run each job in a user namespace of its own (its root is an unprivileged host uid).
user_namespaces = {{.Jobs.UserNamespaces}}
# Most processes a job's renter may run in it at once (gpunex job exec); 0: none.
max_execs = {{.Jobs.MaxExecs}}

[payout]
# How you are paid: method "usdc" (to solana_address) or "bank" (account_name, iban, bic),
# schedule "weekly" (Mondays) or "monthly" (first business day). Empty method: not set yet.
method = "{{.Payout.Method}}"
schedule = "{{.Payout.Schedule}}"
solana_address = "{{.Payout.SolanaAddress}}"
account_name = "{{.Payout.AccountName}}"
iban = "{{.Payout.IBAN}}"
bic = "{{.Payout.BIC}}"
{{range .Provider.GPUs}}
[[provider.gpus]]
# GPU model as renters search for it, e.g. H100-80GB, A100-80GB, L40S-48GB, L4-24GB, RTX4090-24GB.
model = "{{.Model}}"
count = {{.Count}}
vram_gb = {{.VRAMGB}}
# USDC per GPU-hour (up to 6 decimals). ` + "`gpunex offer set-price`" + ` changes it at run time.
price_usdc = "{{.PriceUSDC}}"
# true when there is no NVIDIA hardware behind this entry (devnet, tests).
simulated = {{.Simulated}}
# Simulated GPUs only: performance as a fraction of the datasheet (0.6: a throttled GPU).
perf_factor = {{.PerfFactor}}
{{end}}{{end}}`))

// ErrNotRunning is returned when the home's daemon is not running.
var ErrNotRunning = errors.New("node not running")

// APIEndpoint returns the base URL of the running daemon's local API and its token.
func (h Home) APIEndpoint() (base, token string, err error) {
	b, err := os.ReadFile(h.Path(APIAddrFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("%w: no %s in %s (start it with `gpunex node run --home %s`)", ErrNotRunning, APIAddrFile, h.Dir, h.Dir)
	}
	if err != nil {
		return "", "", err
	}
	tok, err := h.Token()
	if err != nil {
		return "", "", err
	}
	return strings.TrimSpace(string(b)), tok, nil
}

// WriteAPIAddr records where the API listens, for the CLI.
func (h Home) WriteAPIAddr(addr string) error {
	return WriteFileAtomic(h.Path(APIAddrFile), []byte("http://"+addr+"\n"), 0o600)
}

// RemoveAPIAddr removes api.addr when the daemon stops.
func (h Home) RemoveAPIAddr() { os.Remove(h.Path(APIAddrFile)) }
