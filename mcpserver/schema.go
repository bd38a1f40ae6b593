package mcpserver

import (
	"encoding/json"
	"fmt"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/progress"
)

// The advertised schemas are written by hand so that a client sees exactly
// what the server enforces (docs/format.md, Limits): which fields each artifact type
// takes, the enums, and the limits. They use only keywords that draft-07 and
// 2020-12 validators read alike (no $schema, no prefixItems).

// Patterns of docs/format.md (Limits), in the ECMA-262 subset every validator reads.
const (
	taskIDPattern = `^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`
	keyPattern    = `^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`
	// urlPattern: http or https (the scheme is case-insensitive) and a host,
	// with no user name or password before it.
	urlPattern = `^[Hh][Tt][Tt][Pp][Ss]?://[^/?#@\s]+(?:[/?#]|$)`
	// textPattern refuses control characters other than tab, newline and
	// carriage return (the C0 and C1 controls and DEL).
	textPattern = `^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F]*$`
	hashPattern = `^sha256:[0-9a-f]{64}$`
	hexPattern  = `^[0-9a-f]{64}$`
)

// Names of the tools.
const (
	ToolPostArtifact = "bernstein_post_artifact"
	ToolTaskHandle   = "bernstein_task_handle"
)

type obj = map[string]any

func taskIDSchema() obj {
	return obj{
		"type":        "string",
		"description": "The task id: 1 to 128 of letters, digits and _ . : - starting with a letter or digit, never containing \"..\".",
		"minLength":   1,
		"maxLength":   128,
		"pattern":     taskIDPattern,
		"not":         obj{"pattern": `\.\.`},
	}
}

// textSchema is a string of at most max characters without control
// characters other than tab, newline and carriage return.
func textSchema(description string, min, max int) obj {
	s := obj{"type": "string", "description": description, "maxLength": max, "pattern": textPattern}
	if min > 0 {
		s["minLength"] = min
	}
	return s
}

// forbid says that none of fields may be present.
func forbid(fields ...string) obj {
	present := make([]any, len(fields))
	for i, f := range fields {
		present[i] = obj{"required": []string{f}}
	}
	return obj{"not": obj{"anyOf": present}}
}

// typeBranch is the oneOf branch of one artifact type: its discriminator,
// the fields it needs and the fields it refuses.
func typeBranch(typ, title string, required, refused []string) obj {
	b := forbid(refused...)
	b["title"] = title
	b["properties"] = obj{"artifact_type": obj{"const": typ}}
	b["required"] = required
	return b
}

func postInputSchema() obj {
	cell := textSchema(fmt.Sprintf("A cell: at most %d characters.", artifact.MaxCellChars), 0, artifact.MaxCellChars)
	column := textSchema(fmt.Sprintf("A column name: non-empty, at most %d characters, not starting with a byte-order mark (U+FEFF).", artifact.MaxCellChars), 1, artifact.MaxCellChars)
	column["not"] = obj{"pattern": "^\ufeff"} // the character itself: ECMA-262 and RE2 read it alike
	return obj{
		"type":        "object",
		"description": "Post one artifact version to a task whose live claim the caller holds. The caller is the transport's identity, never an argument. artifact_type decides the other fields: report takes body; table takes columns and rows; link takes url and link_kind. The payload's canonical JSON is at most 1 MiB.",
		"properties": obj{
			"task_id": taskIDSchema(),
			"key": obj{
				"type":        "string",
				"description": "The artifact key: 1 to 128 of letters, digits and _ . - starting with a letter or digit. Posting a key again makes its next version.",
				"minLength":   1,
				"maxLength":   artifact.MaxKeyBytes,
				"pattern":     keyPattern,
			},
			"artifact_type": obj{
				"type":        "string",
				"description": "report (markdown body), table (columns and rows) or link (url and link_kind).",
				"enum":        artifact.Types,
			},
			"body": textSchema(fmt.Sprintf("report: the markdown body; not blank, at most %d bytes of UTF-8.", artifact.MaxPayloadBytes), 1, artifact.MaxPayloadBytes),
			"columns": obj{
				"type":        "array",
				"description": fmt.Sprintf("table: the column names, in order; 1 to %d, distinct.", artifact.MaxColumns),
				"minItems":    1,
				"maxItems":    artifact.MaxColumns,
				"uniqueItems": true,
				"items":       column,
			},
			"rows": obj{
				"type":        "array",
				"description": fmt.Sprintf("table: the rows, each with one cell per column; at most %d rows ([] for none).", artifact.MaxRows),
				"maxItems":    artifact.MaxRows,
				"items": obj{
					"type":     "array",
					"maxItems": artifact.MaxColumns,
					"items":    cell,
				},
			},
			"url": obj{
				"type":        "string",
				"description": fmt.Sprintf("link: an http or https URL with a host and no user name or password (links are pushed to every remote); at most %d characters, no spaces or control characters.", artifact.MaxURLChars),
				"minLength":   1,
				"maxLength":   artifact.MaxURLChars,
				"pattern":     urlPattern,
			},
			"link_kind": obj{
				"type":        "string",
				"description": "link: what the URL is.",
				"enum":        artifact.LinkKinds,
			},
		},
		"required":             []string{"task_id", "key", "artifact_type"},
		"additionalProperties": false,
		"oneOf": []any{
			typeBranch(artifact.TypeReport, "report", []string{"body"}, []string{"columns", "rows", "url", "link_kind"}),
			typeBranch(artifact.TypeTable, "table", []string{"columns", "rows"}, []string{"body", "url", "link_kind"}),
			typeBranch(artifact.TypeLink, "link", []string{"url", "link_kind"}, []string{"body", "columns", "rows"}),
		},
	}
}

func hashSchema(description string, allowEmpty bool) obj {
	p := hashPattern
	if allowEmpty {
		p = `^(sha256:[0-9a-f]{64})?$`
	}
	return obj{"type": "string", "description": description, "pattern": p}
}

func intSchema(description string, min int) obj {
	return obj{"type": "integer", "description": description, "minimum": min}
}

func postOutputSchema() obj {
	return obj{
		"type":        "object",
		"description": "The receipt of the post: the version's record in the journal, the spine and the audit mirror.",
		"properties": obj{
			"task":              obj{"type": "string", "description": "The task id."},
			"key":               obj{"type": "string", "description": "The artifact key."},
			"version":           intSchema("The version this post made (1 for a new key).", 1),
			"type":              obj{"type": "string", "enum": artifact.Types},
			"link_kind":         obj{"type": "string", "description": "The link kind (\"\" unless a link)."},
			"content_hash":      hashSchema("sha256 of the payload's canonical bytes.", false),
			"blob":              obj{"type": "string", "description": "The git object id of the payload blob.", "pattern": `^[0-9a-f]{40,64}$`},
			"size":              intSchema("Size of the payload's canonical bytes.", 0),
			"spine_entry_hash":  hashSchema("The version's identity: the hash of its lineage spine entry.", false),
			"prev_version_hash": hashSchema("The previous version's spine entry hash (\"\" for version 1).", true),
			"journal_index":     intSchema("The index of the artifact_posted row in the task's journal.", 0),
			"writer":            obj{"type": "string", "description": "The writer (installation) that stored the post."},
			"agent":             obj{"type": "string", "description": "The posting agent: the caller."},
		},
		"required": []string{"task", "key", "version", "type", "content_hash", "blob", "size", "spine_entry_hash", "prev_version_hash", "journal_index", "writer", "agent"},
	}
}

func handleInputSchema() obj {
	return obj{
		"type":                 "object",
		"description":          "Read a task's handle: its status, chain heads and progress vector.",
		"properties":           obj{"task_id": taskIDSchema()},
		"required":             []string{"task_id"},
		"additionalProperties": false,
	}
}

func progressSchema() obj {
	count := func(d string) obj { return intSchema(d, 0) }
	fault := obj{
		"type": "object",
		"properties": obj{
			"chain":  obj{"type": "string", "enum": []string{"journal", "ledger"}},
			"index":  count("The row's index in its chain."),
			"writer": obj{"type": "string", "description": "The writer the row's commit names (\"\" when none)."},
			"state":  obj{"type": "string", "enum": []string{"tampered", "unverifiable"}},
			"reason": obj{"type": "string"},
		},
		"required":             []string{"chain", "index", "writer", "state", "reason"},
		"additionalProperties": false,
	}
	return obj{
		"type":        "object",
		"description": "The progress vector's wire form: the canonical fields (whose RFC 8785 bytes vector_hash hashes), the derived ones, the chain heads it was folded at, and its proof. Only rows a trusted writer signed count; new work only (a new tree checkpointed, a change captured, a declared gate's pass, a declared producer's pass count once).",
		"properties": obj{
			"schema_version":    obj{"type": "integer", "const": progress.SchemaVersion},
			"task_id":           obj{"type": "string"},
			"checkpoints":       count("Checkpoints of new trees: a tree that differs from its commit's first parent's, counted once."),
			"diffs_captured":    count("Changes captured: distinct pairs of different trees, in either order."),
			"gate_attempts":     count("gate_attempt rows, declared gates and ad-hoc ones."),
			"gates_passed":      count("Gates declared at task.created that passed at least once."),
			"evidence_declared": count("Evidence producers declared at task.created."),
			"evidence_passed":   count("Declared producers whose latest result passed."),
			"ledger_phase":      obj{"type": "string"},
			"ledger_attempts":   count("task.started rows."),
			"terminal":          obj{"type": "boolean"},
			"earned_steps":      count("checkpoints + diffs_captured + gates_passed + evidence_passed."),
			"phase_ordinal":     obj{"type": "integer", "minimum": -1, "maximum": 4},
			"vector_hash":       obj{"type": "string", "description": "sha256 hex of the canonical vector.", "pattern": hexPattern},
			"journal_head":      hashSchema("Row hash of the last journal row counted (\"\" before the first row).", true),
			"journal_rows":      count("Journal rows counted."),
			"ledger_head":       hashSchema("Row hash of the last ledger row counted.", true),
			"ledger_rows":       count("Ledger rows counted."),
			"proof": obj{
				"type":        "object",
				"description": "verified: every row counted, each signed by a trusted writer; unverifiable: this reader trusts no key, rows counted as far as their published keys check; tampered: rows_at_fault did not count.",
				"properties": obj{
					"state":         obj{"type": "string", "enum": []string{"verified", "unverifiable", "tampered"}},
					"rows_at_fault": obj{"type": "array", "items": fault},
				},
				"required":             []string{"state", "rows_at_fault"},
				"additionalProperties": false,
			},
		},
		"required": []string{"schema_version", "task_id", "checkpoints", "diffs_captured", "gate_attempts", "gates_passed",
			"evidence_declared", "evidence_passed", "ledger_phase", "ledger_attempts", "terminal",
			"earned_steps", "phase_ordinal", "vector_hash", "journal_head", "journal_rows", "ledger_head", "ledger_rows", "proof"},
	}
}

func handleOutputSchema() obj {
	return obj{
		"type":        "object",
		"description": "The task handle: a projection of the task's chains. receiptHash is sha256 over the RFC 8785 bytes of every other field.",
		"properties": obj{
			"taskId":       obj{"type": "string"},
			"status":       obj{"type": "string", "enum": []string{bernstein.StatusWorking, bernstein.StatusInputRequired, bernstein.StatusCompleted, bernstein.StatusFailed, bernstein.StatusCancelled}},
			"journalHead":  hashSchema("Row hash of the task's journal head (\"\" before the first row).", true),
			"spineHead":    hashSchema("Spine entry hash of the latest artifact version in the journal (\"\" before the first).", true),
			"progress":     progressSchema(),
			"progressHash": obj{"type": "string", "description": "= progress.vector_hash.", "pattern": hexPattern},
			"receiptHash":  hashSchema("sha256 of the canonical bytes of the other fields.", false),
		},
		"required": []string{"taskId", "status", "journalHead", "spineHead", "progress", "progressHash", "receiptHash"},
	}
}

// raw encodes a schema once, at registration.
func raw(s obj) json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}
