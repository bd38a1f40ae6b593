package bernstein

import (
	"fmt"

	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/verify"
)

// ArtifactDiffDoc is the document of 'artifact diff --output-json' and of
// GET /api/v1/tasks/{id}/artifacts/{key}/diff: two versions of one key,
// each with its verify state, and what changed from the first to the
// second. Both are verified first: when either may not be shown
// (tampered, its journal broken or rolled back, or not verified under
// strict), nothing is compared: Diff is null and Refused says why.
type ArtifactDiffDoc struct {
	Task    string             `json:"task"`
	Key     string             `json:"key"`
	From    ArtifactVersionDoc `json:"from"`
	To      ArtifactVersionDoc `json:"to"`
	Refused string             `json:"refused"`
	Diff    *artifact.Diff     `json:"diff"`
}

// DiffSelection says which two versions of a key a diff compares. Without
// From and To: the version before the latest, and the latest. With From
// alone: From and the latest.
type DiffSelection struct {
	Key      string
	From, To *int64
	// Strict compares only verified versions.
	Strict bool
}

// NoEarlierVersionError reports a key with one version and no version
// named to compare it with. errors.Is(err, ErrUnknownArtifact) holds.
type NoEarlierVersionError struct {
	Task, Key string
	Version   int64
}

func (e *NoEarlierVersionError) Error() string {
	return fmt.Sprintf("task %s has no version of %s before v%d: nothing to compare it with", e.Task, e.Key, e.Version)
}

// Is makes errors.Is(err, ErrUnknownArtifact) hold.
func (e *NoEarlierVersionError) Is(target error) bool { return target == ErrUnknownArtifact }

// NewArtifactDiffDoc compares two versions of a key of a task's
// verification. A key or version the task does not hold is an
// *UnknownArtifactError, a key with a single version and nothing named a
// *NoEarlierVersionError.
func NewArtifactDiffDoc(rep *verify.TaskReport, sel DiffSelection) (*ArtifactDiffDoc, error) {
	latest := rep.Latest(sel.Key)
	if latest == nil {
		return nil, &UnknownArtifactError{Task: rep.Task, Key: sel.Key}
	}
	pick := func(n int64) (*verify.Version, error) {
		if v := rep.Find(sel.Key, n); v != nil {
			return v, nil
		}
		return nil, &UnknownArtifactError{Task: rep.Task, Key: sel.Key, Version: n, Pinned: true}
	}
	to := latest
	var from *verify.Version
	var err error
	if sel.To != nil {
		if to, err = pick(*sel.To); err != nil {
			return nil, err
		}
	}
	if sel.From != nil {
		if from, err = pick(*sel.From); err != nil {
			return nil, err
		}
	} else {
		// The version before To: the newest older one (numbers may skip
		// where a version was lost to a broken chain).
		for i := range rep.Versions {
			v := &rep.Versions[i]
			if v.Key == sel.Key && v.Version < to.Version && (from == nil || v.Version > from.Version) {
				from = v
			}
		}
		if from == nil {
			return nil, &NoEarlierVersionError{Task: rep.Task, Key: sel.Key, Version: to.Version}
		}
	}
	doc := &ArtifactDiffDoc{Task: rep.Task, Key: sel.Key, From: NewArtifactVersionDoc(*from), To: NewArtifactVersionDoc(*to)}
	var payloads [2]artifact.Payload
	for i, v := range []*verify.Version{from, to} {
		content, why := rep.Content(v)
		switch {
		case content == nil && v.State == verify.Tampered:
			doc.Refused = fmt.Sprintf("v%d is tampered: %s", v.Version, why)
		case content == nil:
			doc.Refused = fmt.Sprintf("v%d is withheld: %s", v.Version, why)
		case sel.Strict && v.State != verify.Verified:
			doc.Refused = fmt.Sprintf("v%d is not verified (%s: %s) and strict compares only verified versions", v.Version, v.State, v.Reason)
		}
		if doc.Refused != "" {
			return doc, nil
		}
		p, err := artifact.Parse(content)
		if err != nil {
			doc.Refused = fmt.Sprintf("v%d does not parse: %v", v.Version, err)
			return doc, nil
		}
		payloads[i] = p
	}
	d := artifact.Compare(payloads[0], payloads[1])
	doc.Diff = &d
	return doc, nil
}
