package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Errors a person can act on: every error names the file, the line and
// the key ("aluad.yaml:12: interlink.penalty: ..."), a misspelt key gets
// the key it was probably meant to be, and no Go type name shows.

// scalar is one key or value of the document, with where it is.
type scalar struct {
	path  string // dotted path of the key (a value: of its key)
	value string
	line  int
	key   bool
}

// scalars lists every key and scalar value under n, in document order.
func scalars(n *yaml.Node, path string, out []scalar) []scalar {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			out = scalars(c, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			out = append(out, scalar{path: p, value: k.Value, line: k.Line, key: true})
			out = scalars(v, p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			out = scalars(c, fmt.Sprintf("%s[%d]", path, i), out)
		}
	case yaml.ScalarNode:
		out = append(out, scalar{path: path, value: n.Value, line: n.Line})
	}
	return out
}

var (
	reLine     = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	reUnknown  = regexp.MustCompile("^field (\\S+) not found in type (\\S+)$")
	reType     = regexp.MustCompile("^cannot unmarshal !!(\\w+) `(.*)` into (\\S+)$")
	reSizeLine = regexp.MustCompile(`^line (\d+): `)
	reLUN      = regexp.MustCompile(`\bLUN (\d+)\b`)
	reQuoted   = regexp.MustCompile(`"([^"]+)"`)
)

// decodeError turns the YAML decoder's error into lines a person reads.
func decodeError(path string, root *yaml.Node, err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	all := scalars(root, "", nil)
	var out []string
	for _, m := range msgs {
		line, rest := 0, m
		if sub := reLine.FindStringSubmatch(m); sub != nil {
			line, _ = strconv.Atoi(sub[1])
			rest = sub[2]
		}
		if strings.HasPrefix(rest, "did not find expected ',' or") {
			// The parser names where the unclosed [ or { opened, counting
			// lines from 0.
			line++
			rest = "a [ or { opened on this line is not closed (" + rest + ")"
		}
		if sub := reSizeLine.FindStringSubmatch(rest); sub != nil { // a value type's own "line N: "
			line, _ = strconv.Atoi(sub[1])
			rest = rest[len(sub[0]):]
		}
		switch sub := reUnknown.FindStringSubmatch(rest); {
		case sub != nil:
			key := sub[1]
			at := find(all, line, func(s scalar) bool { return s.key && s.value == key })
			parent := ""
			if i := strings.LastIndex(at.path, "."); i >= 0 {
				parent = at.path[:i]
			}
			rest = fmt.Sprintf("unknown key %q", key)
			if parent != "" {
				rest += " in " + strip(parent)
			}
			known := keysAt(parent)
			if s := closest(key, known); s != "" {
				rest += fmt.Sprintf(" (did you mean %q?)", s)
			} else if len(known) > 0 {
				rest += " (known: " + strings.Join(known, ", ") + ")"
			}
		default:
			if sub := reType.FindStringSubmatch(rest); sub != nil {
				val := sub[2]
				at := find(all, line, func(s scalar) bool { return !s.key && s.value == val })
				rest = fmt.Sprintf("%s: %q is not %s", strip(at.path), val, kindOf(sub[3]))
			} else if at := find(all, line, func(s scalar) bool { return !s.key }); at.path != "" {
				rest = strip(at.path) + ": " + rest
			}
		}
		if line > 0 {
			out = append(out, fmt.Sprintf("%s:%d: %s", path, line, rest))
		} else {
			out = append(out, fmt.Sprintf("%s: %s", path, rest))
		}
	}
	return errors.New(strings.Join(out, "\n"))
}

// strip takes the sequence indexes off a path (hosts[1].type: hosts.type
// reads worse than "host h2", but the line says which).
func strip(p string) string { return regexp.MustCompile(`\[\d+\]`).ReplaceAllString(p, "") }

// find is the first scalar on line that ok accepts (the zero scalar if
// none).
func find(all []scalar, line int, ok func(scalar) bool) scalar {
	for _, s := range all {
		if s.line == line && ok(s) {
			return s
		}
	}
	return scalar{}
}

// kindOf says what a Go type of the config expects, in words.
func kindOf(goType string) string {
	switch {
	case goType == "time.Duration":
		return "a duration (e.g. 50us, 250ms, 10s)"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "uint"):
		return "a whole number"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "Config"):
		return "a section (key: value lines)"
	case goType == "string":
		return "a string"
	}
	return "a value of the right kind"
}

// keysAt lists the keys the config accepts in the section at path (""
// for the top level).
func keysAt(path string) []string {
	t := reflect.TypeOf(Config{})
	if path != "" {
		for _, part := range strings.Split(strip(path), ".") {
			t = field(t, part)
			if t == nil {
				return nil
			}
		}
	}
	return tags(deref(t))
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice) {
		t = t.Elem()
	}
	return t
}

// field is the type of t's field whose YAML key is key.
func field(t reflect.Type, key string) reflect.Type {
	t = deref(t)
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if strings.Contains(opts, "inline") {
			if ft := field(f.Type, key); ft != nil {
				return ft
			}
			continue
		}
		if name == key {
			return f.Type
		}
	}
	return nil
}

// tags lists a struct's YAML keys (inline structs' included).
func tags(t reflect.Type) []string {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case strings.Contains(opts, "inline"):
			out = append(out, tags(deref(f.Type))...)
		case name != "" && name != "-":
			out = append(out, name)
		}
	}
	return out
}

// closest is the known key a misspelt one was probably meant to be: the
// nearest by edit distance, if near enough ("" if none is).
func closest(key string, known []string) string {
	best, bestD := "", 1<<30
	for _, k := range known {
		if d := distance(strings.ToLower(key), k); d < bestD {
			best, bestD = k, d
		}
	}
	if bestD <= max(2, len(key)/3) {
		return best
	}
	return ""
}

// distance is the Levenshtein distance, with a swap of two neighbours
// counted as one edit ("alau" is one from "alua").
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			c := 1
			if ra[i-1] == rb[j-1] {
				c = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+c)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// validationError places a check's error on the line of the document it
// is about: the key or value it names (the longest one it names, so
// "host h1: unknown type \"beos\"" is beos's line).
func validationError(path string, root *yaml.Node, err error) error {
	msg := err.Error()
	all := scalars(root, "", nil)
	// A thing defined twice is wrong the second time.
	twice := strings.Contains(msg, "twice") || strings.Contains(msg, "unique") || strings.Contains(msg, "declared by")
	var best scalar
	pick := func(s scalar) {
		if best.line == 0 || twice {
			best = s
		}
	}
	// A value the message quotes is the one it is about ("unknown type
	// \"beos\""); of several scalars with that value, one under a key the
	// message names ("preferred owner \"a\"": preferred).
	for _, q := range reQuoted.FindAllStringSubmatch(msg, -1) {
		var keyed, any []scalar
		for _, s := range all {
			if s.key || s.value != q[1] {
				continue
			}
			any = append(any, s)
			if k := s.path[strings.LastIndex(s.path, ".")+1:]; names(msg, k) {
				keyed = append(keyed, s)
			}
		}
		if len(keyed) > 0 {
			any = keyed
		}
		for _, s := range any {
			pick(s)
		}
		if best.line != 0 {
			break
		}
	}
	// A LUN the message names by id: that LUN's entry under luns (a
	// mapping's lun: names it too, but is not where it is defined).
	if sub := reLUN.FindStringSubmatch(msg); best.line == 0 && sub != nil {
		for _, s := range all {
			if !s.key && s.value == sub[1] && strings.HasPrefix(s.path, "luns[") && strings.HasSuffix(s.path, ".id") {
				pick(s)
			}
		}
		// The key it names under that LUN, if any ("block_size").
		if best.line != 0 {
			entry := best.path[:strings.LastIndex(best.path, ".")]
			for _, s := range all {
				if s.key && strings.HasPrefix(s.path, entry+".") && names(msg, s.value) {
					best = s
					break
				}
			}
		}
	}
	// Else the longest key or value it names, the last of equals. What
	// follows "known:" lists the choices, not the mistake.
	if best.line == 0 {
		about, _, _ := strings.Cut(msg, "known:")
		for _, s := range all {
			if len(s.value) >= 2 && len(s.value) >= len(best.value) && names(about, s.value) {
				best = s
			}
		}
	}
	if best.line == 0 {
		return fmt.Errorf("%s: %w", path, err)
	}
	return fmt.Errorf("%s:%d: %w", path, best.line, err)
}

// names says msg has v as a whole word (not inside a longer one).
func names(msg, v string) bool {
	for i := 0; ; {
		j := strings.Index(msg[i:], v)
		if j < 0 {
			return false
		}
		j += i
		before := j == 0 || !word(msg[j-1])
		after := j+len(v) == len(msg) || !word(msg[j+len(v)])
		if before && after {
			return true
		}
		i = j + 1
	}
}

func word(c byte) bool {
	return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
