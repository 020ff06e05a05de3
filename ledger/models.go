package ledger

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// ModelStore keeps the model catalogues of the trusted coordinators (models/).
type ModelStore struct{ *kv }

const prefixModels = "models/"

// KeptModelCatalogues is the most model catalogues a node keeps per coordinator; it keeps
// fewer when older ones can no longer be named by a valid attestation (models.needed).
const KeptModelCatalogues = 64

// SaveModelCatalogue stores a coordinator's model catalogue of a sequence, and forgets
// that coordinator's catalogues older than the KeptModelCatalogues newest.
func (s *ModelStore) SaveModelCatalogue(coordinator string, seq uint64, raw []byte) error {
	prefix := prefixModels + coordinator + "/"
	return s.db.Update(func(txn *badger.Txn) error {
		if err := txn.Set([]byte(fmt.Sprintf("%s%020d", prefix, seq)), raw); err != nil {
			return err
		}
		var keys []string
		if err := scan(txn, prefix, func(key string, _ []byte) error { keys = append(keys, key); return nil }); err != nil {
			return err
		}
		for len(keys) > KeptModelCatalogues { // keys sort by sequence: the oldest first
			if err := txn.Delete([]byte(prefix + keys[0])); err != nil {
				return err
			}
			keys = keys[1:]
		}
		return nil
	})
}

// ModelCatalogues returns every stored model catalogue.
func (s *ModelStore) ModelCatalogues() ([][]byte, error) {
	var out [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefixModels, func(_ string, val []byte) error {
			out = append(out, append([]byte(nil), val...))
			return nil
		})
	})
	return out, err
}
