package witness_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"filippo.io/torchwood"

	"github.com/bernstein/bernstein/internal/witness"
	"github.com/bernstein/bernstein/internal/witnesstest"
)

const origin = "example.test/bernstein/log"

// exchangeTimeout bounds one request; generous for a loaded machine.
const exchangeTimeout = 2 * time.Minute

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), exchangeTimeout)
	t.Cleanup(cancel)
	return c
}

// setup runs a litewitness that knows the log l.
func setup(t *testing.T, l *memLog) (*witnesstest.Witness, witness.Witness) {
	t.Helper()
	lw := witnesstest.Start(t)
	lw.AddLog(t, l.origin, l.vkey)
	w, err := witness.ParseWitness("w1", lw.URL(), lw.VerifierKey())
	if err != nil {
		t.Fatalf("ParseWitness(litewitness's own key): %v", err)
	}
	return lw, w
}

// checkCosigIndependently verifies a cosignature line by the
// c2sp.org/tlog-cosignature message format with crypto/ed25519 directly, and
// returns its timestamp.
func checkCosigIndependently(t *testing.T, vkey string, signed, line []byte) time.Time {
	t.Helper()
	parts := strings.SplitN(vkey, "+", 3)
	key, _ := base64.StdEncoding.DecodeString(parts[2])
	text := signed[:bytes.LastIndex(signed, []byte("\n\n"))+1]
	fields := strings.Fields(strings.TrimPrefix(string(line), "— "))
	if len(fields) != 2 || fields[0] != parts[0] || bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("cosignature line %q is not one line by %s", line, parts[0])
	}
	raw, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil || len(raw) != 4+8+ed25519.SignatureSize {
		t.Fatalf("cosignature %q: %d bytes, %v", fields[1], len(raw), err)
	}
	ts := binary.BigEndian.Uint64(raw[4:12])
	msg := fmt.Appendf(nil, "cosignature/v1\ntime %d\n%s", ts, text)
	if !ed25519.Verify(ed25519.PublicKey(key[1:]), msg, raw[12:]) {
		t.Fatalf("cosignature %q does not verify by ed25519 over the cosignature/v1 message", line)
	}
	return time.Unix(int64(ts), 0)
}

func TestConsistentExtensionIsCosigned(t *testing.T) {
	l := newMemLog(t, origin)
	_, w := setup(t, l)
	before := time.Now().Add(-time.Second)

	l.appendLeaves(t, "a", 3)
	first := l.checkpoint(t)
	cosig, err := witness.AddCheckpoint(ctx(t), w, 0, nil, first)
	if err != nil {
		t.Fatalf("first checkpoint: %v", err)
	}
	want := checkCosigIndependently(t, w.Key, first, cosig)

	l.appendLeaves(t, "a", 4)
	second := l.checkpoint(t)
	cosig2, err := witness.AddCheckpoint(ctx(t), w, 3, l.proof(t, 3), second)
	if err != nil {
		t.Fatalf("consistent extension 3 -> 7: %v", err)
	}
	checkCosigIndependently(t, w.Key, second, cosig2)

	got, err := witness.VerifyCosignature(w, first, cosig)
	if err != nil {
		t.Fatalf("VerifyCosignature: %v", err)
	}
	if !got.Equal(want) || got.Before(before) || got.After(time.Now().Add(time.Second)) {
		t.Fatalf("cosignature time %v, want %v (signed after %v)", got, want, before)
	}
	if _, err := witness.VerifyCosignature(w, second, cosig2); err != nil {
		t.Fatalf("VerifyCosignature on the second: %v", err)
	}
	// A cosignature is over one checkpoint: not over another one.
	if _, err := witness.VerifyCosignature(w, second, cosig); !errors.Is(err, witness.ErrBadCosignature) {
		t.Fatalf("cosignature of size 3 checked over size 7: %v, want ErrBadCosignature", err)
	}
}

func TestInconsistentProofIsRefused(t *testing.T) {
	l := newMemLog(t, origin)
	_, w := setup(t, l)
	l.appendLeaves(t, "a", 3)
	if _, err := witness.AddCheckpoint(ctx(t), w, 0, nil, l.checkpoint(t)); err != nil {
		t.Fatal(err)
	}
	// A fork: the same three first leaves rewritten, then more.
	fork := newMemLog(t, origin)
	fork.signer, fork.vkey = l.signer, l.vkey
	fork.appendLeaves(t, "b", 7)
	_, err := witness.AddCheckpoint(ctx(t), w, 3, fork.proof(t, 3), fork.checkpoint(t))
	var se *witness.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusUnprocessableEntity || !errors.Is(err, witness.ErrBadProof) {
		t.Fatalf("forked checkpoint: %v, want a 422 ErrBadProof", err)
	}
	if !strings.Contains(err.Error(), "w1") || !strings.Contains(err.Error(), w.URL) {
		t.Fatalf("error %q does not name the witness and its URL", err)
	}
}

func TestStaleOldSizeIsAConflict(t *testing.T) {
	l := newMemLog(t, origin)
	_, w := setup(t, l)
	l.appendLeaves(t, "a", 3)
	if _, err := witness.AddCheckpoint(ctx(t), w, 0, nil, l.checkpoint(t)); err != nil {
		t.Fatal(err)
	}
	l.appendLeaves(t, "a", 4)
	if _, err := witness.AddCheckpoint(ctx(t), w, 3, l.proof(t, 3), l.checkpoint(t)); err != nil {
		t.Fatal(err)
	}
	l.appendLeaves(t, "a", 2)
	_, err := witness.AddCheckpoint(ctx(t), w, 3, l.proof(t, 3), l.checkpoint(t))
	var ce *witness.ConflictError
	if !errors.As(err, &ce) || ce.Size != 7 || ce.OldSize != 3 || ce.Witness.Name != "w1" {
		t.Fatalf("stale old size: %v, want a ConflictError with the witness's size 7", err)
	}
}

func TestUnknownOriginIsRefused(t *testing.T) {
	l := newMemLog(t, origin)
	_, w := setup(t, l)
	other := newMemLog(t, "example.test/unregistered")
	other.appendLeaves(t, "a", 2)
	_, err := witness.AddCheckpoint(ctx(t), w, 0, nil, other.checkpoint(t))
	if !errors.Is(err, witness.ErrUnknownLog) {
		t.Fatalf("unknown origin: %v, want ErrUnknownLog", err)
	}
}

func TestCheckpointByWrongKeyIsRefused(t *testing.T) {
	l := newMemLog(t, origin)
	_, w := setup(t, l)
	impostor := newMemLog(t, origin) // same origin, another key
	l.appendLeaves(t, "a", 2)
	_, err := witness.AddCheckpoint(ctx(t), w, 0, nil, l.checkpointBy(t, impostor.signer))
	var se *witness.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusForbidden || !errors.Is(err, witness.ErrBadSignature) {
		t.Fatalf("checkpoint signed by another key: %v, want a 403 ErrBadSignature", err)
	}
}

func TestTamperedCosignatureFails(t *testing.T) {
	l := newMemLog(t, origin)
	_, w := setup(t, l)
	l.appendLeaves(t, "a", 5)
	cp := l.checkpoint(t)
	cosig, err := witness.AddCheckpoint(ctx(t), w, 0, nil, cp)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(cosig))
	raw, _ := base64.StdEncoding.DecodeString(fields[2])
	for _, i := range []int{5, len(raw) - 1} { // the timestamp, the signature
		bad := bytes.Clone(raw)
		bad[i] ^= 1
		line := []byte("— " + fields[1] + " " + base64.StdEncoding.EncodeToString(bad) + "\n")
		if _, err := witness.VerifyCosignature(w, cp, line); !errors.Is(err, witness.ErrBadCosignature) {
			t.Errorf("cosignature with byte %d flipped: %v, want ErrBadCosignature", i, err)
		}
	}
	// Over a checkpoint whose root was changed.
	text := bytes.Replace(cp, []byte("\n5\n"), []byte("\n6\n"), 1)
	if _, err := witness.VerifyCosignature(w, text, cosig); !errors.Is(err, witness.ErrBadCosignature) {
		t.Errorf("cosignature over a changed checkpoint: %v, want ErrBadCosignature", err)
	}
	// By a key of the same name that is not the witness's.
	other := otherKey(t, w.KeyName())
	w2 := w
	w2.Key = other
	if _, err := witness.VerifyCosignature(w2, cp, cosig); !errors.Is(err, witness.ErrBadCosignature) {
		t.Errorf("cosignature checked with another key: %v, want ErrBadCosignature", err)
	}
}

// otherKey is a fresh cosignature/v1 verifier key named name.
func otherKey(t *testing.T, name string) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := torchwood.NewCosignatureSigner(name, priv)
	if err != nil {
		t.Fatal(err)
	}
	return s.Verifier().String()
}

// A witness configured with a key that is not the one the server signs with:
// AddCheckpoint must not hand back what it answered.
func TestAddCheckpointVerifiesTheAnswer(t *testing.T) {
	l := newMemLog(t, origin)
	_, w := setup(t, l)
	w.Key = otherKey(t, w.KeyName())
	l.appendLeaves(t, "a", 2)
	cosig, err := witness.AddCheckpoint(ctx(t), w, 0, nil, l.checkpoint(t))
	if !errors.Is(err, witness.ErrBadCosignature) || cosig != nil {
		t.Fatalf("answer signed by another key: %q, %v; want ErrBadCosignature", cosig, err)
	}
}

// A witness's answer altered on the way (here by a proxy in front of a real
// litewitness that flips one bit of the signature) is refused.
func TestAddCheckpointRefusesATamperedAnswer(t *testing.T) {
	l := newMemLog(t, origin)
	lw, w := setup(t, l)
	target, err := url.Parse(lw.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(r *http.Response) error {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			fields := strings.Fields(string(body))
			raw, _ := base64.StdEncoding.DecodeString(fields[2])
			raw[len(raw)-1] ^= 1
			body = []byte("— " + fields[1] + " " + base64.StdEncoding.EncodeToString(raw) + "\n")
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Del("Content-Length")
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	w.URL = srv.URL
	l.appendLeaves(t, "a", 2)
	cosig, err := witness.AddCheckpoint(ctx(t), w, 0, nil, l.checkpoint(t))
	if !errors.Is(err, witness.ErrBadCosignature) || cosig != nil {
		t.Fatalf("tampered answer: %q, %v; want ErrBadCosignature", cosig, err)
	}
}

func TestProbeReportsRollback(t *testing.T) {
	l := newMemLog(t, origin)
	_, w := setup(t, l)
	l.appendLeaves(t, "a", 3)
	old := l.checkpoint(t)
	if _, err := witness.AddCheckpoint(ctx(t), w, 0, nil, old); err != nil {
		t.Fatal(err)
	}
	fork := l.copyLog()
	l.appendLeaves(t, "a", 5)
	current := l.checkpoint(t)
	if _, err := witness.AddCheckpoint(ctx(t), w, 3, l.proof(t, 3), current); err != nil {
		t.Fatal(err)
	}

	// A clone shown the log rolled back to size 3.
	res, err := witness.Probe(ctx(t), w, old)
	if err != nil || !res.Larger() || res.WitnessSize != 8 || res.Size != 3 || res.Cosignature != nil {
		t.Fatalf("probe of the rolled-back checkpoint: %+v, %v; want witness size 8 > 3", res, err)
	}
	// A clone shown the current log: confirmed with a fresh cosignature.
	res, err = witness.Probe(ctx(t), w, current)
	if err != nil || res.Larger() || res.WitnessSize != 8 {
		t.Fatalf("probe of the current checkpoint: %+v, %v", res, err)
	}
	if _, err := witness.VerifyCosignature(w, current, res.Cosignature); err != nil {
		t.Fatalf("probe's cosignature: %v", err)
	}
	// A clone shown another history of the same size.
	fork.appendLeaves(t, "b", 5)
	_, err = witness.Probe(ctx(t), w, fork.checkpoint(t))
	var fe *witness.ForkError
	if !errors.As(err, &fe) || fe.Size != 8 || fe.Origin != origin {
		t.Fatalf("probe of a forked checkpoint of the same size: %v, want a ForkError at 8", err)
	}
}
