// Package protocol holds gpunex's wire contract: record types, protocol IDs, gossip topic
// names, DHT keys, signing and verification, size limits and validation rules.
//
// It is pure: no network or disk I/O, no goroutines. Everything that crosses the network is
// decoded and checked here first, so that every node (DHT validator, gossip validator,
// renter, auditor running `gpunex verify`) applies exactly the same rules.
package protocol
