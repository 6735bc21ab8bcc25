package conf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads the configuration file at path; see Parse.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("conf: %w", err)
	}
	return Parse(data, path)
}

// LoadOrDefault loads the file at path, or returns Default() when path is "" (no
// configuration file given).
func LoadOrDefault(path string) (*Config, error) {
	if path == "" {
		return Default(), nil
	}
	return Load(path)
}

// Parse decodes a configuration, fills in the defaults and validates the result. filename
// only labels errors. Decoding is strict: an unknown key is an error, because a misspelt
// key silently left at its default is worse than a refusal to start. An empty file (or one
// of comments only) gives the defaults.
//
// On failure Parse returns nil and an *Errors holding every problem it found (syntax,
// unknown keys, values of the wrong type, invalid values), each with its line and field.
func Parse(data []byte, filename string) (*Config, error) {
	errs, c := decode(data)
	for i := range errs {
		errs[i].File = filename
	}
	errs.sortByLine()
	if len(errs) > 0 {
		return nil, errs.err()
	}
	return c, nil
}

// decode does Parse's work, leaving the file name to it.
//
// The file is parsed twice: once into a yaml.Node tree, whose keys carry their lines and
// let errors name the field, and once strictly into a Config. yaml.v3 only checks for
// unknown keys when decoding from a Decoder, and Node.Decode is not one.
func decode(data []byte) (errorList, *Config) {
	root, errs := parseTree(data)
	if len(errs) > 0 {
		return errs, nil
	}
	idx := newIndex(root)
	var c Config
	if root != nil {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			errs = idx.decodeErrors(err)
		}
	}
	c.EnsureDefaults()
	for _, e := range c.validate() {
		// A field whose value could not be decoded was left at its default; whatever
		// Validate says about it would only be noise next to the decode error.
		if errs.reports(e.Field) {
			continue
		}
		e.Line = idx.line(e.Field)
		errs = append(errs, e)
	}
	return errs, &c
}

// parseTree parses the one YAML document in data; it returns nil for an empty file.
func parseTree(data []byte) (*yaml.Node, errorList) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err == io.EOF {
		return nil, nil
	} else if err != nil {
		return nil, errorList{syntaxError(err)}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
		return &doc, nil
	case err != nil:
		return nil, errorList{syntaxError(err)}
	default:
		return nil, errorList{{Line: extra.Line, Msg: "a second YAML document; the file must hold exactly one"}}
	}
}

// syntaxError turns a yaml.v3 parse error ("yaml: line 3: could not find expected ':'")
// into an Error with its line.
func syntaxError(err error) Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line, rest := splitLine(msg)
	return Error{Line: line, Msg: rest}
}

// reports reports whether a problem was already found with field or a field inside it.
func (l errorList) reports(field string) bool {
	for _, e := range l {
		if e.Field != "" && (field == e.Field || strings.HasPrefix(field, e.Field+".") || strings.HasPrefix(field, e.Field+"[")) {
			return true
		}
	}
	return false
}

// decodeErrors maps an error from the strict decode to Errors.
func (idx *index) decodeErrors(err error) errorList {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return errorList{syntaxError(err)}
	}
	errs := make(errorList, len(te.Errors))
	for i, s := range te.Errors {
		errs[i] = idx.typeError(s)
	}
	return errs
}
