package postbody

import (
	"fmt"

	"github.com/bernstein/bernstein/artifact"
)

// The advertised schema of a post is written by hand so that a client sees
// exactly what the decoder enforces (docs/format.md, Limits): which fields
// each artifact type takes, the enums, and the limits. It uses only
// keywords that draft-07 and 2020-12 validators read alike (no $schema, no
// prefixItems): MCP advertises it as the tool's input schema, the OpenAPI
// description (JSON Schema 2020-12) as PostArtifact.

// Patterns of docs/format.md (Limits), in the ECMA-262 subset every validator reads.
const (
	TaskIDPattern = `^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`
	KeyPattern    = `^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`
	// URLPattern: http or https (the scheme is case-insensitive) and a host,
	// with no user name or password before it.
	URLPattern = `^[Hh][Tt][Tt][Pp][Ss]?://[^/?#@\s]+(?:[/?#]|$)`
	// TextPattern refuses control characters other than tab, newline and
	// carriage return (the C0 and C1 controls and DEL).
	TextPattern = `^[^\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F]*$`
)

type obj = map[string]any

// TaskIDSchema is the schema of a task id.
func TaskIDSchema() map[string]any {
	return obj{
		"type":        "string",
		"description": "The task id: 1 to 128 of letters, digits and _ . : - starting with a letter or digit, never containing \"..\".",
		"minLength":   1,
		"maxLength":   128,
		"pattern":     TaskIDPattern,
		"not":         obj{"pattern": `\.\.`},
	}
}

// textSchema is a string of at most max characters without control
// characters other than tab, newline and carriage return.
func textSchema(description string, min, max int) obj {
	s := obj{"type": "string", "description": description, "maxLength": max, "pattern": TextPattern}
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
	b["properties"] = obj{FieldType: obj{"const": typ}}
	b["required"] = required
	return b
}

// Schema is the JSON schema of a post on s (its fields: Surface.Fields).
func Schema(s Surface) map[string]any {
	cell := textSchema(fmt.Sprintf("A cell: at most %d characters.", artifact.MaxCellChars), 0, artifact.MaxCellChars)
	column := textSchema(fmt.Sprintf("A column name: non-empty, at most %d characters, not starting with a byte-order mark (U+FEFF).", artifact.MaxCellChars), 1, artifact.MaxCellChars)
	column["not"] = obj{"pattern": "^\ufeff"} // the character itself: ECMA-262 and RE2 read it alike
	props := obj{
		FieldKey: obj{
			"type":        "string",
			"description": "The artifact key: 1 to 128 of letters, digits and _ . - starting with a letter or digit. Posting a key again makes its next version.",
			"minLength":   1,
			"maxLength":   artifact.MaxKeyBytes,
			"pattern":     KeyPattern,
		},
		FieldType: obj{
			"type":        "string",
			"description": "report (markdown body), table (columns and rows) or link (url and link_kind).",
			"enum":        artifact.Types,
		},
		FieldBody: textSchema(fmt.Sprintf("report: the markdown body; not blank, at most %d bytes of UTF-8.", artifact.MaxPayloadBytes), 1, artifact.MaxPayloadBytes),
		FieldColumns: obj{
			"type":        "array",
			"description": fmt.Sprintf("table: the column names, in order; 1 to %d, distinct.", artifact.MaxColumns),
			"minItems":    1,
			"maxItems":    artifact.MaxColumns,
			"uniqueItems": true,
			"items":       column,
		},
		FieldRows: obj{
			"type":        "array",
			"description": fmt.Sprintf("table: the rows, each with one cell per column; at most %d rows ([] for none).", artifact.MaxRows),
			"maxItems":    artifact.MaxRows,
			"items": obj{
				"type":     "array",
				"maxItems": artifact.MaxColumns,
				"items":    cell,
			},
		},
		FieldURL: obj{
			"type":        "string",
			"description": fmt.Sprintf("link: an http or https URL with a host and no user name or password (links are pushed to every remote); at most %d characters, no spaces or control characters.", artifact.MaxURLChars),
			"minLength":   1,
			"maxLength":   artifact.MaxURLChars,
			"pattern":     URLPattern,
		},
		FieldLinkKind: obj{
			"type":        "string",
			"description": "link: what the URL is.",
			"enum":        artifact.LinkKinds,
		},
	}
	required := []string{FieldKey, FieldType}
	description := "Post one artifact version to a task whose live claim the caller holds. The caller is the transport's identity, never an argument. artifact_type decides the other fields: report takes body; table takes columns and rows; link takes url and link_kind. The payload's canonical JSON is at most 1 MiB."
	if s == MCP {
		props[FieldTask] = TaskIDSchema()
		required = append([]string{FieldTask}, required...)
	} else {
		description = "The arguments of the MCP tool bernstein_post_artifact without task_id (the task is the path's). The caller is the bearer claim token: fields such as agent or claim_token are refused. artifact_type decides the other fields: report takes body; table takes columns and rows; link takes url and link_kind. The payload's canonical JSON is at most 1 MiB."
	}
	return obj{
		"type":                 "object",
		"description":          description,
		"properties":           props,
		"required":             required,
		"additionalProperties": false,
		"oneOf": []any{
			typeBranch(artifact.TypeReport, "report", []string{FieldBody}, []string{FieldColumns, FieldRows, FieldURL, FieldLinkKind}),
			typeBranch(artifact.TypeTable, "table", []string{FieldColumns, FieldRows}, []string{FieldBody, FieldURL, FieldLinkKind}),
			typeBranch(artifact.TypeLink, "link", []string{FieldURL, FieldLinkKind}, []string{FieldBody, FieldColumns, FieldRows}),
		},
	}
}
