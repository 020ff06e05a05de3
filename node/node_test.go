package node

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/gpunex/gpunex/ledger"
	"github.com/gpunex/gpunex/node/config"
)

// TestNewFailsCleanly: a node that cannot start (its p2p port is taken by another program)
// says why and leaves nothing running; it used to panic while taking down what it had
// started.
func TestNewFailsCleanly(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(ledger.Options{InMemory: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(config.RoleRenter)
	cfg.P2P.Listen = []string{"/ip4/127.0.0.1/tcp/" + strconv.Itoa(port)}
	n, err := New(context.Background(), cfg, key, Deps{Ledger: l, Logger: quietLogger()})
	if err == nil {
		n.Close(context.Background())
		t.Fatal("a node started on a port another program holds")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("the error does not say the port is taken: %v", err)
	}
}
