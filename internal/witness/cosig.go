package witness

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
)

// ErrBadCosignature is wrapped by every error saying that a cosignature does
// not verify against the witness's key.
var ErrBadCosignature = errors.New("cosignature does not verify")

// VerifyCosignature checks that sigLines (one or more note signature lines,
// "— name base64\n") hold a valid cosignature/v1 by w's key over the
// checkpoint (its text, or the signed note: its own signatures are ignored),
// and returns the time the witness says it signed at. Lines by other keys are
// ignored; one line by w's key that does not verify is an error.
func VerifyCosignature(w Witness, checkpoint []byte, sigLines []byte) (time.Time, error) {
	v, err := w.verifier()
	if err != nil {
		return time.Time{}, err
	}
	text, _, err := checkpointText(checkpoint)
	if err != nil {
		return time.Time{}, fmt.Errorf("witness %s: %w", w.Name, err)
	}
	sig, err := openCosigned(v, text, sigLines)
	if err != nil {
		return time.Time{}, fmt.Errorf("witness %s (%s): %w", w.Name, w.KeyName(), err)
	}
	t, err := fnote.CoSigV1Timestamp(sig)
	if err != nil {
		return time.Time{}, fmt.Errorf("witness %s: cosignature timestamp: %w", w.Name, err)
	}
	return t, nil
}

// openCosigned verifies sigLines over text with v, the way the protocol says
// a client reads a witness's answer: appended to the checkpoint text and
// opened as a note with the witness's key. It returns the one signature of
// v's key.
func openCosigned(v note.Verifier, text, sigLines []byte) (note.Signature, error) {
	if len(sigLines) == 0 || sigLines[len(sigLines)-1] != '\n' {
		return note.Signature{}, fmt.Errorf("%w: signature lines must end in a newline", ErrBadCosignature)
	}
	msg := make([]byte, 0, len(text)+1+len(sigLines))
	msg = append(append(append(msg, text...), '\n'), sigLines...)
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		return note.Signature{}, fmt.Errorf("%w: %v", ErrBadCosignature, err)
	}
	if !bytes.Equal([]byte(n.Text), text) {
		return note.Signature{}, fmt.Errorf("%w: the signature lines change the signed text", ErrBadCosignature)
	}
	for _, s := range n.Sigs {
		if s.Hash == v.KeyHash() && s.Name == v.Name() {
			return s, nil
		}
	}
	return note.Signature{}, fmt.Errorf("%w: no signature by the witness's key", ErrBadCosignature)
}

// sigLine renders one note signature as the line the protocol carries.
func sigLine(s note.Signature) []byte {
	return []byte("— " + s.Name + " " + s.Base64 + "\n")
}
