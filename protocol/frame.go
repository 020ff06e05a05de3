package protocol

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// Every stream protocol of gpunex carries frames: an unsigned varint length, then that many
// bytes. Request and response streams carry one JSON value per frame.

// WriteFrame writes b as one frame.
func WriteFrame(w io.Writer, b []byte) error {
	var lenBuf [binary.MaxVarintLen64]byte
	if _, err := w.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(b)))]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// ReadFrame reads one frame of at most max bytes. A longer frame is ErrTooLarge before any
// of it is read; a bad length or a short frame is ErrMalformed.
func ReadFrame(r *bufio.Reader, max int) ([]byte, error) {
	size, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, fmt.Errorf("%w: frame length: %v", ErrMalformed, err)
	}
	if size > uint64(max) {
		return nil, fmt.Errorf("%w: frame of %d bytes, at most %d", ErrTooLarge, size, max)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("%w: truncated frame: %v", ErrMalformed, err)
	}
	return b, nil
}

// WriteJSONFrame writes v, encoded as JSON, as one frame.
func WriteJSONFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteFrame(w, b)
}

// ReadJSONFrame reads one frame of at most max bytes and decodes it as JSON into v.
func ReadJSONFrame(r *bufio.Reader, max int, v any) error {
	b, err := ReadFrame(r, max)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// ReadSyncFrames reads the frames of a catalogue sync answer (length-prefixed offer records)
// until EOF, enforcing the sync limits: at most MaxSyncOffers records of at most MaxOfferSize
// bytes each.
func ReadSyncFrames(r *bufio.Reader, each func(raw []byte)) error {
	for i := 0; ; i++ {
		size, err := binary.ReadUvarint(r)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: sync frame length: %v", ErrMalformed, err)
		}
		if i >= MaxSyncOffers || size > MaxOfferSize {
			return fmt.Errorf("%w: sync answer exceeds its limits (record %d, %d bytes)", ErrTooLarge, i, size)
		}
		raw := make([]byte, size)
		if _, err := io.ReadFull(r, raw); err != nil {
			return fmt.Errorf("%w: truncated sync frame: %v", ErrMalformed, err)
		}
		each(raw)
	}
}
