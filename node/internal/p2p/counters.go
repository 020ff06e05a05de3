package p2p

// Counter is one of the peer's running counts, exported by the node as a metric.
type Counter struct {
	Name, Help string
	Value      func() int64
}

// Counters are the peer's counts an operator watches (docs/api.md, "Metrics").
func (p *Peer) Counters() []Counter {
	return []Counter{
		{"gpunex_autonat_refused_total", "AutoNAT requests refused past the budget of their network (p2p.AutoNATPerNetwork a minute).",
			p.AutoNATRefused},
		{"gpunex_gossip_over_budget_total", "Gossip messages rejected past their sender's budget of repeated and ignored records (p2p.IgnoredPerMinute a minute, bursts of p2p.IgnoredBurst): each costs the sender gossip score.",
			p.OverBudget},
		{"gpunex_gossip_repairs_total", "Reconnections to a bootstrap peer (a coordinator) that stayed connected but out of this node's gossip on every topic for 20 s (at most once per 10 minutes per peer).",
			p.GossipRepairs},
		{"gpunex_gossip_stream_retries_total", "Gossip streams to a connected peer tried again after failing to open (resource limits, a peer out of stream credit): without them, gossip with that peer would stop until it reconnects.",
			p.GossipStreamRetries},
		{"gpunex_gossip_peers_taken_in_total", "Peers gossipsub took in by the gossip stream they opened, identify having ended on the connection without gossipsub taking them in (it failed on this end): without it, this node's subscriptions never reached them and they published nothing to it.",
			p.GossipPeersTakenIn},
		{"gpunex_identify_failures_total", "Connections whose identify exchange failed: gossipsub takes a peer in only once identify names its protocols (or the peer opens its gossip stream), so a connection whose identify failed on both ends carries no gossip until it is replaced.",
			p.IdentifyFailures},
		{"gpunex_identify_reconnections_total", "Reconnections to a bootstrap peer (a coordinator) that gossipsub had not taken in 5 s after an identify failure (then at most once a minute per coordinator): both ends run identify again on the new connection.",
			p.IdentifyReplacements},
		{"gpunex_bootstrap_redials_total", "Dials of a bootstrap peer (a coordinator) this node was not connected to, made because what it publishes (a provider's offer) had no coordinator among its gossip peers for 30 s (then after 1, 2, 4 and every 5 minutes while it lasts).",
			p.BootstrapRedials},
	}
}
