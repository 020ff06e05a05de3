package protocol

import "sort"

// Versions is what this build speaks: each record kind's payload version, each stream
// protocol and each gossip topic (`gpunex version`). Two builds interoperate where these
// agree; a record of another payload version is refused (unknown_version), a stream protocol
// not spoken is refused by libp2p's negotiation.
type Versions struct {
	Records map[Kind]int `json:"records"`
	Streams []string     `json:"streams"`
	Topics  []string     `json:"topics"`
}

// Spoken returns the versions of this build.
func Spoken() Versions {
	v := Versions{Records: map[Kind]int{
		KindOffer: OfferVersion, KindApplication: ApplicationVersion, KindCertificate: CertificateVersion,
		KindRevocation: RevocationVersion, KindNotification: NotificationVersion,
		KindProposal: JobVersion, KindLease: JobVersion, KindReceipt: JobVersion, KindCountersignature: JobVersion,
		KindCheckpoint: JobVersion, KindDispute: JobVersion, KindDecision: JobVersion,
		KindChallenge: AttestationVersion, KindAttestation: AttestationVersion, KindNetworkReceipt: AttestationVersion,
		KindUptimeProof: ScoreVersion, KindScore: ScoreVersion,
		KindEscrowHold: SettlementVersion, KindPayoutSettings: SettlementVersion, KindPayoutBatch: SettlementVersion,
		KindMarketStats: SettlementVersion, KindModelCatalogue: ModelsVersion,
	},
		Streams: []string{OfferProtocol, OfferSyncProtocol, RevocationSyncProtocol, ScoreSyncProtocol, ModelsSyncProtocol, ApplyProtocol, NotifyProtocol,
			JobProtocol, JobControlProtocol, JobTunnelProtocol, JobExecProtocol, JobInputProtocol, JobReportProtocol, HoldReleaseProtocol, WalletProtocol, UptimeProtocol,
			BenchNetProtocol, BenchChallengeProtocol},
		Topics: []string{OffersTopic, ModelTopicPrefix + "MODEL", RevocationsTopic, ScoresTopic, MarketTopic, ModelsTopic},
	}
	sort.Strings(v.Streams)
	sort.Strings(v.Topics)
	return v
}
