package chain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/bernstein/bernstein/gitstore"
)

// RecordShape says why commit c has the shape of one of bernstein's own
// record commits (a commit of a journal, ledger, spine, audit, writers or
// keys chain), or "" when it has none. It decides from the commit alone, in
// a constant number of reads, whether or not any ref reaches it: bernstein
// writes every chain commit with a <name@bernstein> author and committer
// and a message whose body is one canonical record, and lays its trees out
// as the chain's format says (docs/format.md). Any one of these marks is
// enough, so a crafted commit that imitates one is caught as well.
func RecordShape(objs *gitstore.Repo, c gitstore.Commit) (string, error) {
	if who := bernsteinIdent(c.Committer); who != "" {
		return fmt.Sprintf("its committer %s is a bernstein writer's identity", who), nil
	}
	if who := bernsteinIdent(c.Author); who != "" {
		return fmt.Sprintf("its author %s is a bernstein identity", who), nil
	}
	if carriesRecord(c.Message) {
		return "its message carries a bernstein record", nil
	}
	what, err := chainTree(objs, c.Tree)
	if err != nil {
		return "", err
	}
	if what != "" {
		return "its tree is laid out as " + what, nil
	}
	return "", nil
}

// bernsteinIdent returns the <email> of an identity line whose address is
// in the bernstein domain (bernstein's chain commits use <name@bernstein>),
// "" otherwise.
func bernsteinIdent(ident string) string {
	lt := strings.IndexByte(ident, '<')
	if lt < 0 {
		return ""
	}
	gt := strings.IndexByte(ident[lt:], '>')
	if gt < 0 {
		return ""
	}
	email := ident[lt+1 : lt+gt]
	if strings.HasSuffix(strings.ToLower(strings.TrimSpace(email)), "@bernstein") {
		return "<" + email + ">"
	}
	return ""
}

// carriesRecord reports whether a commit message's body (after the summary
// and a blank line) is a single line holding a JSON object with a "v"
// member: every bernstein record has one (docs/format.md, Records), and the
// test does not ask for canonical bytes, so a near-copy of a record is
// caught too.
func carriesRecord(msg []byte) bool {
	i := bytes.Index(msg, []byte("\n\n"))
	if i < 0 {
		return false
	}
	body := bytes.TrimSpace(msg[i+2:])
	if len(body) < 2 || body[0] != '{' || bytes.IndexByte(body, '\n') >= 0 {
		return false
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil {
		return false
	}
	_, ok := members["v"]
	return ok
}

var (
	// A journal row's output: outputs/<index>-<name>.<ext>.
	outputName = regexp.MustCompile(`^[0-9]{6}-.+\.(patch|log)$`)
	// An artifact version: artifacts/<key>/v<n>.json.
	versionName = regexp.MustCompile(`^v[0-9]+\.json$`)
	// A published key's files: <writer>.pub, <writer>.json, <writer>.json.sig.
	keyFileName = regexp.MustCompile(`^[a-z0-9-]{1,64}\.(pub|json|json\.sig)$`)
)

// chainTree says which chain's layout tree has ("" for none): a journal
// row's (one output, or one artifact version), a spine seal's (seal.sig
// alone) or published keys (allowed_signers beside <writer>.pub/.json/
// .json.sig files). The empty tree, which ledger, spine and audit commits
// carry, is also a project's empty commit: it is no mark (and earns
// nothing, as it changes nothing).
func chainTree(objs *gitstore.Repo, tree gitstore.Oid) (string, error) {
	es, err := readTree(objs, tree)
	if err != nil || len(es) == 0 {
		return "", err
	}
	if len(es) == 1 {
		e := es[0]
		switch {
		case e.Name == "seal.sig" && !e.IsTree():
			return "a spine seal's (seal.sig)", nil
		case e.Name == "outputs" && e.IsTree():
			sub, err := readTree(objs, e.ID)
			if err != nil {
				return "", err
			}
			if len(sub) == 1 && !sub[0].IsTree() && outputName.MatchString(sub[0].Name) {
				return "a journal row's (outputs/" + sub[0].Name + ")", nil
			}
		case e.Name == "artifacts" && e.IsTree():
			keys, err := readTree(objs, e.ID)
			if err != nil {
				return "", err
			}
			if len(keys) == 1 && keys[0].IsTree() {
				vs, err := readTree(objs, keys[0].ID)
				if err != nil {
					return "", err
				}
				if len(vs) == 1 && !vs[0].IsTree() && versionName.MatchString(vs[0].Name) {
					return "a journal row's (artifacts/" + keys[0].Name + "/" + vs[0].Name + ")", nil
				}
			}
		}
	}
	signers, keyFiles := false, 0
	for _, e := range es {
		switch {
		case e.IsTree():
			return "", nil
		case e.Name == "allowed_signers":
			signers = true
		case keyFileName.MatchString(e.Name):
			keyFiles++
		default:
			return "", nil
		}
	}
	if signers && keyFiles > 0 {
		return "published writer keys' (allowed_signers and key files)", nil
	}
	return "", nil
}

func readTree(objs *gitstore.Repo, id gitstore.Oid) ([]gitstore.TreeEntry, error) {
	if id == gitstore.EmptyTree {
		return nil, nil
	}
	data, err := objs.ReadType(id, gitstore.TypeTree)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id, err)
	}
	es, err := gitstore.ParseTree(data)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", id, err)
	}
	return es, nil
}
