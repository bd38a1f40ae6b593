package witness

import (
	"context"
	"errors"
	"fmt"
)

// ProbeResult is what a witness says about a checkpoint a reader holds.
type ProbeResult struct {
	Size        uint64 // the checkpoint's size
	WitnessSize uint64 // the size of the witness's latest cosigned checkpoint
	Cosignature []byte // the witness's verified cosignature line, when WitnessSize == Size
}

// Larger reports that the witness has cosigned a larger checkpoint of the log
// than the one probed: the log the reader was shown is older than one the
// witness saw, either rolled back or not yet fetched again.
func (r ProbeResult) Larger() bool { return r.WitnessSize > r.Size }

// Probe asks the witness about signedCheckpoint by submitting it with an old
// size equal to its own size and no proof. A witness whose latest cosigned
// checkpoint is this one cosigns it again (Cosignature is set); one that
// knows another size answers with it (409), which Probe returns in
// WitnessSize; one that cosigned a different tree of the same size is a
// *ForkError.
func Probe(ctx context.Context, w Witness, signedCheckpoint []byte) (ProbeResult, error) {
	_, c, err := checkpointText(signedCheckpoint)
	if err != nil {
		return ProbeResult{}, fmt.Errorf("witness %s: %w", w.Name, err)
	}
	res := ProbeResult{Size: c.Size}
	cosig, err := AddCheckpoint(ctx, w, c.Size, nil, signedCheckpoint)
	var conflict *ConflictError
	switch {
	case err == nil:
		res.WitnessSize, res.Cosignature = c.Size, cosig
		return res, nil
	case errors.As(err, &conflict):
		res.WitnessSize = conflict.Size
		return res, nil
	}
	return ProbeResult{}, err
}
