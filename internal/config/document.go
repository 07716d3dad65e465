package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// The configuration document as written, checked before it is decoded:
// viper lower-cases every key and mapstructure stops a struct's report at
// its first bad value, so on their own they showed an unknown key as
// "policy.suspectaftr" (or "polcy" under an empty path), hid it behind a
// type error elsewhere, and said "cannot parse value as 'int'" without the
// value. Here every key is checked against the settings the Agent struct
// defines, in file order, spelled as the user wrote it, with the nearest
// known setting; every value against its setting's type, quoting the value.

// docProblem is one mistake in the document; path is the setting as
// written (inventory.nodes[1].credentialSecret).
type docProblem struct {
	path string
	msg  string
}

func (p docProblem) Error() string {
	if p.path == "" {
		return p.msg
	}
	return p.path + ": " + p.msg
}

// checkDocument reports every key of doc that names no setting and every
// value of the wrong type. A YAML syntax error is left to the decoder.
func checkDocument(doc []byte) []docProblem {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil || len(root.Content) == 0 {
		return nil
	}
	var out []docProblem
	checkValue(&out, "", root.Content[0], reflect.TypeOf(Agent{}))
	return out
}

var durationType = reflect.TypeOf(time.Duration(0))

// checkValue checks node against the Go type t of the setting at path.
func checkValue(out *[]docProblem, path string, node *yaml.Node, t reflect.Type) {
	if node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	if node.Kind == yaml.ScalarNode && node.Tag == "!!null" {
		return // an empty value keeps the default
	}
	bad := func(format string, args ...any) {
		*out = append(*out, docProblem{path: path, msg: fmt.Sprintf(format, args...)})
	}
	if t == durationType {
		if node.Kind != yaml.ScalarNode {
			bad("want a duration (e.g. 30s, 5m), not %s", kindName(node))
			return
		}
		var data any = node.Value
		switch node.Tag {
		case "!!int":
			data, _ = strconv.ParseInt(node.Value, 0, 64)
		case "!!float":
			data, _ = strconv.ParseFloat(node.Value, 64)
		}
		if _, err := durationHook(reflect.TypeOf(data), durationType, data); err != nil {
			bad("%v", err)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if node.Kind != yaml.MappingNode {
			bad("want a mapping of settings, not %s", kindName(node))
			return
		}
		fields := settingsOf(t)
		for i := 0; i+1 < len(node.Content); i += 2 {
			key, val := node.Content[i].Value, node.Content[i+1]
			sub := key
			if path != "" {
				sub = path + "." + key
			}
			ft, ok := fields.lookup(key)
			if !ok {
				*out = append(*out, docProblem{path: sub, msg: fields.unknown(key)})
				continue
			}
			checkValue(out, sub, val, ft)
		}
	case reflect.Slice:
		if node.Kind == yaml.ScalarNode && t.Elem().Kind() == reflect.String {
			return // "a,b": split at commas, as the environment is
		}
		if node.Kind != yaml.SequenceNode {
			bad("want a list, not %s", kindName(node))
			return
		}
		for i, item := range node.Content {
			checkValue(out, fmt.Sprintf("%s[%d]", path, i), item, t.Elem())
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if node.Kind != yaml.ScalarNode || !wholeNumber(node) {
			bad("%s is not a whole number", shown(node))
		}
	case reflect.Float32, reflect.Float64:
		if node.Kind != yaml.ScalarNode || (node.Tag != "!!int" && node.Tag != "!!float" && !parses(node.Value, func(s string) error { _, err := strconv.ParseFloat(s, 64); return err })) {
			bad("%s is not a number", shown(node))
		}
	case reflect.Bool:
		if node.Kind != yaml.ScalarNode || (node.Tag != "!!bool" && !parses(node.Value, func(s string) error { _, err := strconv.ParseBool(s); return err })) {
			bad("%s is not true or false", shown(node))
		}
	case reflect.String:
		if node.Kind != yaml.ScalarNode {
			bad("want text, not %s", kindName(node))
		}
	}
}

// wholeNumber: an integer, a fraction with nothing after the point (3.0),
// or text that reads as an integer (the environment's form).
func wholeNumber(node *yaml.Node) bool {
	switch node.Tag {
	case "!!int":
		return true
	case "!!float":
		f, err := strconv.ParseFloat(node.Value, 64)
		return err == nil && f == math.Trunc(f)
	case "!!str":
		_, err := strconv.ParseInt(node.Value, 0, 64)
		return err == nil
	}
	return false
}

func parses(s string, parse func(string) error) bool { return parse(s) == nil }

// shown quotes text and leaves numbers and booleans as written.
func shown(node *yaml.Node) string {
	if node.Kind != yaml.ScalarNode {
		return kindName(node)
	}
	if node.Tag == "!!str" {
		return strconv.Quote(node.Value)
	}
	return node.Value
}

func kindName(node *yaml.Node) string {
	switch node.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(node.Value)
}

// settings are the keys of one struct, as the YAML spells them.
type settings struct {
	names []string
	types map[string]reflect.Type
}

// settingsOf lists the settings of a struct the way mapstructure decodes
// it: the mapstructure tag's name, else the field's name with a lower-case
// first letter; squashed fields inline; "-" skipped.
func settingsOf(t reflect.Type) settings {
	s := settings{types: map[string]reflect.Type{}}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("mapstructure")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "-" {
				continue
			}
			if strings.Contains(","+opts+",", ",squash,") {
				add(f.Type)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name[:1]) + f.Name[1:]
			}
			s.names = append(s.names, name)
			s.types[name] = f.Type
		}
	}
	add(t)
	return s
}

// lookup finds a setting as viper does, whatever the case of its letters.
func (s settings) lookup(key string) (reflect.Type, bool) {
	for _, n := range s.names {
		if strings.EqualFold(n, key) {
			return s.types[n], true
		}
	}
	return nil, false
}

// unknown says that key names no setting here, with the nearest one when
// it is near enough to be a typo.
func (s settings) unknown(key string) string {
	best, bestDist := "", math.MaxInt
	for _, n := range s.names {
		if d := editDistance(strings.ToLower(key), strings.ToLower(n)); d < bestDist {
			best, bestDist = n, d
		}
	}
	// A typo: a letter or two off, a few in a long name.
	if best != "" && bestDist <= max(2, len(best)/4) {
		return "no such setting; did you mean " + best + "?"
	}
	return "no such setting (configs/agent.example.yaml lists every setting)"
}

// editDistance is the Damerau-Levenshtein distance (optimal string
// alignment): a swap of two neighbouring letters counts once.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
