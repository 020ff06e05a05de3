package solana

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	sol "github.com/gagliardetto/solana-go"
)

// maxKeypairFile bounds what LoadKeypair reads: a 64-number JSON array is under 300 bytes.
const maxKeypairFile = 4096

// NewKeypair returns a fresh random ed25519 key pair (64 bytes: seed then public key).
func NewKeypair() (sol.PrivateKey, error) {
	k, err := sol.NewRandomPrivateKey()
	if err != nil {
		return nil, fmt.Errorf("new keypair: %w", err)
	}
	return k, nil
}

// LoadKeypair reads a key pair in the Solana CLI format (a JSON array of 64 numbers: the
// 32-byte seed then the 32-byte public key). It refuses a file that group or others may
// access (the mode must be 0600 or stricter) and one whose public half does not match its
// seed. Errors never contain key material.
func LoadKeypair(path string) (sol.PrivateKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("keypair: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("keypair: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("keypair %s: not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("keypair %s: mode is %04o, must be 0600 (run: chmod 600 %s)", path, perm, path)
	}
	buf := make([]byte, maxKeypairFile+1)
	n, err := io.ReadFull(f, buf)
	defer clear(buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("keypair %s: reading: %w", path, err)
	}
	if n > maxKeypairFile {
		return nil, fmt.Errorf("keypair %s: file too large to be a keypair", path)
	}
	k, err := parseKeypair(buf[:n])
	if err != nil {
		return nil, fmt.Errorf("keypair %s: %w", path, err)
	}
	return k, nil
}

// parseKeypair decodes the JSON array. Its errors are fixed texts: the decoder's own
// messages may quote bytes of the file.
func parseKeypair(data []byte) (sol.PrivateKey, error) {
	var nums []json.Number
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&nums); err != nil {
		return nil, errors.New("not a JSON array of 64 numbers (Solana CLI keypair format)")
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON array")
	}
	if len(nums) != 64 {
		return nil, fmt.Errorf("holds %d numbers, want 64", len(nums))
	}
	k := make([]byte, 64)
	for i, s := range nums {
		v, err := strconv.ParseUint(string(s), 10, 8)
		if err != nil {
			clear(k)
			return nil, fmt.Errorf("element %d is not a byte (0-255)", i)
		}
		k[i] = byte(v)
	}
	pub := ed25519.NewKeyFromSeed(k[:32]).Public().(ed25519.PublicKey)
	if !bytes.Equal(pub, k[32:]) {
		clear(k)
		return nil, errors.New("the public key half does not match the secret seed")
	}
	return sol.PrivateKey(k), nil
}

// WriteKeypair writes k in the Solana CLI format with mode 0600. It refuses to overwrite an
// existing file, and the file appears whole or not at all (written to a temporary file in
// the same folder, synced, then linked into place).
func WriteKeypair(path string, k sol.PrivateKey) error {
	if len(k) != 64 {
		return fmt.Errorf("keypair %s: key is %d bytes, want 64", path, len(k))
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("keypair %s: %w", path, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("keypair %s: %w", path, err)
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, v := range k {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(v)))
	}
	b.WriteByte(']')
	defer func() {
		buf := b.Bytes()
		clear(buf[:cap(buf)])
	}()

	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".keypair-*.tmp")
	if err != nil {
		return fmt.Errorf("keypair %s: %w", path, err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("keypair %s: %w", path, err)
	}
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("keypair %s: writing: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("keypair %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("keypair %s: %w", path, err)
	}
	// A hard link fails if path exists, so a file created meanwhile is never replaced.
	if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("keypair %s: %w", path, fs.ErrExist)
		}
		// Filesystems without hard links: rename (the existence check above still holds
		// unless another writer races us).
		if _, statErr := os.Lstat(path); statErr == nil {
			return fmt.Errorf("keypair %s: %w", path, fs.ErrExist)
		}
		if err := os.Rename(tmpName, path); err != nil {
			return fmt.Errorf("keypair %s: %w", path, err)
		}
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
