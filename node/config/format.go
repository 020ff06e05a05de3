package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Upgrades (docs/operations.md, "Upgrades"): a home records the format it was written in,
// and a build refuses a home of a newer format than it reads, rather than misreading it;
// settings that move are named with their replacement.

// HomeFormat is the format of the homes this build writes and the newest it reads: the
// layout of the home and of the ledger in data/. It grows when a change makes a home
// unreadable to older builds.
const HomeFormat = 1

// FormatFile records a home's format.
const FormatFile = "home.json"

// homeFormat is the content of FormatFile.
type homeFormat struct {
	Format    int    `json:"format"`
	WrittenBy string `json:"written_by"` // the gpunex version that last wrote it
}

// CheckFormat refuses a home written in a newer format than this build reads. A home
// without FormatFile is from before it: format 1.
func (h Home) CheckFormat() error {
	b, err := os.ReadFile(h.Path(FormatFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var f homeFormat
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("%s: %w", h.Path(FormatFile), err)
	}
	if f.Format > HomeFormat {
		return fmt.Errorf("home %s was written by gpunex %s in home format %d; this gpunex reads up to format %d: upgrade gpunex (docs/operations.md, \"Upgrades\")",
			h.Dir, f.WrittenBy, f.Format, HomeFormat)
	}
	return nil
}

// WriteFormat records that version wrote the home, in this build's format.
func (h Home) WriteFormat(version string) error {
	b, _ := json.Marshal(homeFormat{Format: HomeFormat, WrittenBy: version})
	return WriteFileAtomic(h.Path(FormatFile), append(b, '\n'), 0o600)
}

// MovedSettings maps a setting that moved ("section.key") to its replacement and the
// version that moved it; config.toml naming the old one is refused with the new name.
var MovedSettings = map[string]struct{ To, Since string }{}
