package offers

import (
	"io"
	"log/slog"

	"github.com/gpunex/gpunex/node/internal/recordtest"
)

// testCoordinatorKey signs the certificates of the test providers.
var testCoordinatorKey, testCoordinatorID = recordtest.NewKey()

var testCertificate = recordtest.Certificate

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
