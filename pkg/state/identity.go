package state

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aluad/aluad/pkg/array"
)

// The array's identity: an id created at the first start and kept in the
// state directory (file array-id; in the data directory when no state is
// kept), from which every LUN's NAA designator and serial number derive
// (array.Config.ArrayID). Two arrays never share a WWID, a LUN keeps its
// WWID across restarts, and a new state directory (by default inside the
// data directory) is a new array with new WWIDs. The config's array_id
// overrides the file.

// IdentityFile is the name of the array id's file in the state directory.
const IdentityFile = "array-id"

// ArrayID returns the id the array serves under: the config's, else the
// state directory's (created there at the first start), else, with no
// state directory, the data directory's. fresh says it was just created.
func ArrayID(cfg array.Config, stateDir string) (id string, fresh bool, err error) {
	if cfg.ArrayID != "" {
		return cfg.ArrayID, false, nil
	}
	if stateDir == "" {
		stateDir = cfg.Data
	}
	p := filepath.Join(stateDir, IdentityFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if err := array.ValidArrayID(id); err != nil {
			// Never replaced silently: a new id would give every LUN a
			// new WWID under its hosts.
			return "", false, fmt.Errorf("%s: %w (fix or remove the file; removing it gives every LUN a new WWID)", p, err)
		}
		return id, false, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", false, fmt.Errorf("array id: %w", err)
	}
	if id, err = newArrayID(); err != nil {
		return "", false, err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", false, fmt.Errorf("state directory: %w", err)
	}
	if err := WriteFileAtomic(p, []byte(id+"\n"), ""); err != nil {
		return "", false, fmt.Errorf("array id: %w", err)
	}
	return id, true, nil
}

// newArrayID draws 64 random bits.
func newArrayID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("array id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
