package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpunex/gpunex/protocol"
)

// Check validates the configuration and says what to fix: every mistake found, section by
// section.
func (c *Config) Check() error {
	var errs []error
	for _, check := range []func() []error{c.checkNode, c.checkOffers, c.checkCoordinator, c.checkBench, c.checkJobs, c.checkMoney, c.checkProvider} {
		errs = append(errs, check()...)
	}
	return errors.Join(errs...)
}

// checkNode checks the role and the node-wide settings: the network (p2p), the logs, the
// API's address and the bootstrap peers. (The coordinator's probe interval against the
// score records' lifetime is checked among them, where it always was, so that a file with
// several mistakes is told them in the same order.)
func (c *Config) checkNode() (errs []error) {
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
	if off := c.Debug.ClockOffset.Duration; off < -MaxClockOffset || off > MaxClockOffset {
		errs = append(errs, fmt.Errorf("debug.clock_offset %s: at most %s either way", off, MaxClockOffset))
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
	return errs
}

// checkOffers checks [offers] and the trusted coordinators.
func (c *Config) checkOffers() (errs []error) {
	if c.Offers.TTL.Duration < 10*time.Second || c.Offers.TTL.Duration > protocol.MaxOfferTTL {
		errs = append(errs, fmt.Errorf("offers.ttl %s: must be between 10s and %s", c.Offers.TTL, protocol.MaxOfferTTL))
	}
	if c.Offers.Republish.Duration <= 0 || c.Offers.Republish.Duration > c.Offers.TTL.Duration/2 {
		errs = append(errs, fmt.Errorf("offers.republish %s: must be positive and at most half of offers.ttl (%s)", c.Offers.Republish, c.Offers.TTL))
	}
	if c.Offers.SearchTimeout.Duration <= 0 {
		errs = append(errs, errors.New("offers.search_timeout must be positive"))
	}
	if c.Offers.WarmSearch.Duration <= 0 || c.Offers.WarmSearch.Duration > c.Offers.SearchTimeout.Duration {
		errs = append(errs, fmt.Errorf("offers.warm_search %s: must be positive and at most offers.search_timeout (%s)", c.Offers.WarmSearch, c.Offers.SearchTimeout))
	}
	for _, m := range c.Offers.Models {
		if strings.TrimSpace(m) == "" || len(m) > 64 {
			errs = append(errs, fmt.Errorf("offers.models %q: each must be a model name", m))
		}
	}
	if _, err := c.TrustedCoordinators(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// checkCoordinator checks [coordinator]: scores, listing minimum, reviews, certificates.
func (c *Config) checkCoordinator() (errs []error) {
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
	return errs
}

// checkBench checks [bench].
func (c *Config) checkBench() (errs []error) {
	if b := c.Bench; b.Interval.Duration < time.Minute || b.Interval.Duration > protocol.MaxAttestationAge-24*time.Hour || b.StorageMB < 1 || b.NetworkMB < 1 || b.NetworkMB > protocol.MaxBenchTransfer>>20 || b.SimulatedUploadMbps < 0 {
		errs = append(errs, fmt.Errorf("bench: interval between 1m and %s, storage_mb at least 1, network_mb 1-%d, simulated_upload_mbps not negative", protocol.MaxAttestationAge-24*time.Hour, protocol.MaxBenchTransfer>>20))
	}
	return errs
}

// checkJobs checks [jobs]: images, limits, metering, the jobs' network, blocked renters.
func (c *Config) checkJobs() (errs []error) {
	j := c.Jobs
	if j.MaxImageMB < 1 || j.MemoryMBPerGPU < 16 || j.CPUMillisPerGPU < 100 || j.Pids < 16 || j.ScratchMB < 1 || j.ProposalsPerMinute < 1 {
		errs = append(errs, errors.New("jobs: max_image_mb, scratch_mb and proposals_per_minute must be at least 1, memory_mb_per_gpu 16, cpu_millis_per_gpu 100, pids 16"))
	}
	if j.MaxTunnels < 0 || j.TunnelGBPerJob < 0 || j.TunnelsPerMinute < 1 {
		errs = append(errs, errors.New("jobs: max_tunnels and tunnel_gb_per_job must be at least 0 (0: no tunnels, no bound), tunnels_per_minute at least 1"))
	}
	if ci := j.CheckpointInterval.Duration; ci < time.Second || ci > protocol.CheckpointInterval {
		errs = append(errs, fmt.Errorf("jobs.checkpoint_interval %s: must be between 1s and %s", j.CheckpointInterval, protocol.CheckpointInterval))
	}
	if j.MaxImageUnpackedMB <= 0 || j.ImageCacheGB <= 0 {
		errs = append(errs, fmt.Errorf("jobs.max_image_unpacked_mb and jobs.image_cache_gb must be > 0"))
	}
	if j.MaxInputMB < 0 || j.MaxInputMB<<20 > protocol.MaxInputBytes || j.InputCacheGB<<10 < j.MaxInputMB {
		errs = append(errs, fmt.Errorf("jobs.max_input_mb %d: 0 (no inputs) to %d, and jobs.input_cache_gb at least as much (%d GB)", j.MaxInputMB, int64(protocol.MaxInputBytes>>20), j.InputCacheGB))
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
	for _, b := range j.EgressBlocked {
		p, err := netip.ParsePrefix(b)
		if err != nil {
			a, aerr := netip.ParseAddr(b)
			p, err = netip.PrefixFrom(a, 32), aerr
		}
		if err != nil || !p.Addr().Is4() {
			errs = append(errs, fmt.Errorf("jobs.egress_blocked %q: an IPv4 address or network such as 198.51.100.0/24", b))
		}
	}
	for _, d := range j.DNS {
		if _, err := netip.ParseAddr(d); err != nil {
			errs = append(errs, fmt.Errorf("jobs.dns: %q is not an IP address", d))
		}
	}
	if j.MaxExecs < 0 || j.MaxExecs > 64 {
		errs = append(errs, fmt.Errorf("jobs.max_execs %d: 0 (no shells) to 64", j.MaxExecs))
	}
	if u := j.UnmeteredStop.Duration; u != 0 && u < 5*time.Second {
		errs = append(errs, fmt.Errorf("jobs.unmetered_stop %s: 0 (never) or at least 5s (below %s it stops the jobs of renters countersigning at the slowest pace allowed, once a minute)", j.UnmeteredStop, 2*protocol.CheckpointInterval))
	}
	if j.UnmeteredRenterBan.Duration < 0 {
		errs = append(errs, fmt.Errorf("jobs.unmetered_renter_ban %s: must be 0 (never) or more", j.UnmeteredRenterBan))
	}
	for _, r := range j.BlockedRenters {
		if _, err := peer.Decode(r); err != nil {
			errs = append(errs, fmt.Errorf("jobs.blocked_renters %q: not a peer ID", r))
		}
	}
	return errs
}

// checkMoney checks [settlement] and [payout].
func (c *Config) checkMoney() (errs []error) {
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
	return errs
}

// checkProvider checks [provider] on a provider: its availability and its GPUs.
func (c *Config) checkProvider() (errs []error) {
	if c.Role == RoleProvider {
		if _, err := c.Provider.Schedule(); err != nil {
			errs = append(errs, fmt.Errorf("provider.availability: %w", err))
		}
		if _, err := c.Provider.Items(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// CheckLoopback accepts a host:port whose host is a loopback address: the API is local.
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
