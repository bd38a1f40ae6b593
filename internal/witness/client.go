package witness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// maxProofLines is the protocol's bound on consistency proof lines.
const maxProofLines = 63

// maxResponse bounds what is read of a witness's answer.
const maxResponse = 64 << 10

// The kinds of refusal a witness answers with, by HTTP status; a
// *StatusError wraps one of them (errors.Is).
var (
	ErrUnknownLog   = errors.New("the witness does not know the log's origin")          // 404 (litewitness: 403 "unknown log")
	ErrBadSignature = errors.New("the witness refused the checkpoint's signature")      // 403
	ErrBadProof     = errors.New("the witness refused the consistency proof")           // 422
	ErrBadRequest   = errors.New("the witness refused the request as malformed")        // 400
	ErrUnexpected   = errors.New("the witness answered with an unexpected HTTP status") // any other
)

// StatusError is a refusal by a witness, with its HTTP status and the first
// line of its answer.
type StatusError struct {
	Witness Witness
	Status  int
	Body    string
	Kind    error
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("witness %s (%s): %v: HTTP %d", e.Witness.Name, e.Witness.URL, e.Kind, e.Status)
	if e.Body != "" {
		msg += ": " + strconv.Quote(e.Body)
	}
	return msg
}

func (e *StatusError) Unwrap() error { return e.Kind }

// ConflictError is a 409 Conflict: the witness's latest cosigned checkpoint
// for the log has Size leaves, not the old size the request said.
type ConflictError struct {
	Witness Witness
	OldSize uint64 // what the request said
	Size    uint64 // what the witness knows
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("witness %s (%s): the witness's latest cosigned checkpoint has size %d, not the old size %d",
		e.Witness.Name, e.Witness.URL, e.Size, e.OldSize)
}

// ForkError says that the witness has cosigned a different tree of the same
// size as the checkpoint: the log showed two histories.
type ForkError struct {
	Witness Witness
	Origin  string
	Size    uint64
}

func (e *ForkError) Error() string {
	return fmt.Sprintf("witness %s (%s): the witness has cosigned a different tree of size %d for %s: the log is forked",
		e.Witness.Name, e.Witness.URL, e.Size, e.Origin)
}

// AddCheckpoint submits signedCheckpoint to the witness with a consistency
// proof from oldSize (the size of the witness's latest cosigned checkpoint
// for the log, 0 for the first) and returns the witness's cosignature line(s),
// each verified against w.Key. ctx bounds the whole exchange.
func AddCheckpoint(ctx context.Context, w Witness, oldSize uint64, proof []tlog.Hash, signedCheckpoint []byte) ([]byte, error) {
	v, err := w.verifier()
	if err != nil {
		return nil, err
	}
	text, c, err := checkpointText(signedCheckpoint)
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", w.Name, err)
	}
	if oldSize > c.Size {
		return nil, fmt.Errorf("witness %s: old size %d is larger than the checkpoint's size %d", w.Name, oldSize, c.Size)
	}
	if len(proof) > maxProofLines {
		return nil, fmt.Errorf("witness %s: %d proof lines, the protocol allows %d", w.Name, len(proof), maxProofLines)
	}
	status, body, err := post(ctx, w, requestBody(oldSize, proof, signedCheckpoint))
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, refusal(w, oldSize, c.Origin, c.Size, status, body)
	}
	return cosignatures(w, v, text, body)
}

func requestBody(oldSize uint64, proof []tlog.Hash, signedCheckpoint []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "old %d\n", oldSize)
	for _, h := range proof {
		b.WriteString(h.String())
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(signedCheckpoint)
	return b.Bytes()
}

func post(ctx context.Context, w Witness, body []byte) (int, []byte, error) {
	endpoint := strings.TrimSuffix(w.URL, "/") + "/add-checkpoint"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("witness %s (%s): %w", w.Name, w.URL, err)
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("witness %s (%s): %w", w.Name, w.URL, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return 0, nil, fmt.Errorf("witness %s (%s): reading the answer: %w", w.Name, w.URL, err)
	}
	return resp.StatusCode, answer, nil
}

// refusal turns a non-200 answer into its typed error.
func refusal(w Witness, oldSize uint64, origin string, size uint64, status int, body []byte) error {
	first, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	switch status {
	case http.StatusConflict:
		known, err := strconv.ParseUint(strings.TrimSuffix(string(body), "\n"), 10, 64)
		if err != nil {
			return &StatusError{Witness: w, Status: status, Body: first, Kind: ErrUnexpected}
		}
		if known == oldSize && oldSize == size {
			return &ForkError{Witness: w, Origin: origin, Size: size}
		}
		return &ConflictError{Witness: w, OldSize: oldSize, Size: known}
	case http.StatusUnprocessableEntity:
		if oldSize == size {
			// An empty proof between equal sizes fails only when the roots differ.
			return &ForkError{Witness: w, Origin: origin, Size: size}
		}
		return &StatusError{Witness: w, Status: status, Body: first, Kind: ErrBadProof}
	case http.StatusNotFound:
		return &StatusError{Witness: w, Status: status, Body: first, Kind: ErrUnknownLog}
	case http.StatusForbidden:
		kind := ErrBadSignature
		if first == "unknown log" { // litewitness answers an unknown origin with 403
			kind = ErrUnknownLog
		}
		return &StatusError{Witness: w, Status: status, Body: first, Kind: kind}
	case http.StatusBadRequest:
		return &StatusError{Witness: w, Status: status, Body: first, Kind: ErrBadRequest}
	}
	return &StatusError{Witness: w, Status: status, Body: first, Kind: ErrUnexpected}
}

// cosignatures checks the 200 answer: signature lines only, and one of them a
// valid cosignature by w's key over the checkpoint text. It returns the lines
// by w's key.
func cosignatures(w Witness, v note.Verifier, text, body []byte) ([]byte, error) {
	sig, err := openCosigned(v, text, body)
	if err != nil {
		return nil, fmt.Errorf("witness %s (%s): %w", w.Name, w.URL, err)
	}
	return sigLine(sig), nil
}
