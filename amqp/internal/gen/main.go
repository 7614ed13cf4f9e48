// Command gen writes amqp/methods_gen.go from the machine-readable AMQP
// 0-9-1 specification (RabbitMQ's amqp-rabbitmq-0.9.1.json, kept in
// this directory). It is run by go generate in package amqp:
//
//	go run ./internal/gen -spec internal/gen/amqp-rabbitmq-0.9.1.json -out methods_gen.go
//
// It emits the spec's constants (frame types, reply codes), class ids, one
// struct per method with its Method implementation (ids, name, flags,
// encoder, decoder), DecodeMethod's lookup and MethodDecoder's storage. The
// output depends only on the spec, so regenerating is reproducible. The
// spec's copyright notice stays with the spec file; only facts (names, ids,
// types) are taken from it.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"strings"
)

type spec struct {
	Domains   [][]string `json:"domains"`
	Constants []struct {
		Name  string `json:"name"`
		Value int    `json:"value"`
		Class string `json:"class"`
	} `json:"constants"`
	Classes []class `json:"classes"`
}

type class struct {
	Name    string   `json:"name"`
	ID      int      `json:"id"`
	Methods []method `json:"methods"`
}

type method struct {
	Name        string     `json:"name"`
	ID          int        `json:"id"`
	Synchronous bool       `json:"synchronous"`
	Content     bool       `json:"content"`
	Arguments   []argument `json:"arguments"`
}

type argument struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Domain string `json:"domain"`
}

func main() {
	specPath := flag.String("spec", "internal/gen/amqp-rabbitmq-0.9.1.json", "AMQP spec JSON")
	out := flag.String("out", "methods_gen.go", "output Go file")
	flag.Parse()
	if err := run(*specPath, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(specPath, out string) error {
	raw, err := os.ReadFile(specPath)
	if err != nil {
		return err
	}
	var s spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("%s: %w", specPath, err)
	}
	src, err := generate(&s, filepath.Base(specPath))
	if err != nil {
		return err
	}
	return os.WriteFile(out, src, 0o644)
}

// goTypes maps the spec's primitive types to Go types.
var goTypes = map[string]string{
	"octet":     "uint8",
	"short":     "uint16",
	"long":      "uint32",
	"longlong":  "uint64",
	"bit":       "bool",
	"shortstr":  "string",
	"longstr":   "string",
	"table":     "Table",
	"timestamp": "uint64",
}

// encoders and decoders per spec type (bits are handled separately).
var (
	encoders = map[string]string{
		"octet":     "b = append(b, m.%s)",
		"short":     "b = appendUint16(b, m.%s)",
		"long":      "b = appendUint32(b, m.%s)",
		"longlong":  "b = appendUint64(b, m.%s)",
		"timestamp": "b = appendUint64(b, m.%s)",
		"shortstr":  "b = appendShortstr(b, m.%s)",
		"longstr":   "b = appendLongstr(b, m.%s)",
		"table":     "b = appendTableLossy(b, m.%s)",
	}
	decoders = map[string]string{
		"octet":     "m.%s = d.uint8()",
		"short":     "m.%s = d.uint16()",
		"long":      "m.%s = d.uint32()",
		"longlong":  "m.%s = d.uint64()",
		"timestamp": "m.%s = d.uint64()",
		"shortstr":  "d.shortstr(&m.%s)",
		"longstr":   "d.longstr(&m.%s)",
		"table":     "d.table(&m.%s)",
	}
)

// methodSet are the names of the Method interface's methods; a field may
// not share one. Fields that would are renamed per fieldRenames.
var methodSet = map[string]bool{
	"ClassID": true, "MethodID": true, "Name": true, "HasContent": true,
	"Synchronous": true, "AppendTo": true, "Decode": true,
}

var fieldRenames = map[string]string{
	"ClassID":  "FailingClassID",  // connection.close, channel.close: "failing method class"
	"MethodID": "FailingMethodID", // "failing method ID"
}

// camel converts a spec name to Go MixedCaps: "routing-key" -> "RoutingKey".
// With initialisms, "id" becomes "ID"; "nowait" is spelled "NoWait".
func camel(name string, initialisms bool) string {
	if name == "nowait" {
		return "NoWait"
	}
	var b strings.Builder
	for _, part := range strings.Split(name, "-") {
		if part == "" {
			continue
		}
		if initialisms && part == "id" {
			b.WriteString("ID")
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

type field struct {
	name, typ string // Go name, spec primitive type
	comment   string // set when name is not the spec name in Go case
}

type genMethod struct {
	class      *class
	m          *method
	typeName   string // Go struct name
	fullName   string // "basic.publish"
	fields     []field
	classConst string
}

func generate(s *spec, specName string) ([]byte, error) {
	domains := map[string]string{}
	for _, d := range s.Domains {
		if len(d) != 2 {
			return nil, fmt.Errorf("bad domain %v", d)
		}
		domains[d[0]] = d[1]
	}
	var methods []genMethod
	for ci := range s.Classes {
		c := &s.Classes[ci]
		for mi := range c.Methods {
			m := &c.Methods[mi]
			g := genMethod{
				class:      c,
				m:          m,
				typeName:   camel(c.Name, false) + camel(m.Name, false),
				fullName:   c.Name + "." + m.Name,
				classConst: "Class" + camel(c.Name, false),
			}
			for _, a := range m.Arguments {
				t := a.Type
				if t == "" {
					t = domains[a.Domain]
				}
				if _, ok := goTypes[t]; !ok {
					return nil, fmt.Errorf("%s: argument %s: unknown type %q (domain %q)", g.fullName, a.Name, t, a.Domain)
				}
				f := field{name: camel(a.Name, true), typ: t}
				if methodSet[f.name] {
					r, ok := fieldRenames[f.name]
					if !ok {
						return nil, fmt.Errorf("%s: field %s collides with a Method method", g.fullName, f.name)
					}
					f.comment = fmt.Sprintf(" // %s (%s() is a Method method)", a.Name, f.name)
					f.name = r
				}
				g.fields = append(g.fields, f)
			}
			methods = append(methods, g)
		}
	}

	var w bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	p("// Code generated by amqp/internal/gen; DO NOT EDIT.")
	p("// Source: %s (AMQP 0-9-1 with RabbitMQ's extensions) in amqp/internal/gen;", specName)
	p("// the spec's copyright and licence notice is in that file.")
	p("")
	p("package amqp")
	p("")

	// Constants.
	p("// Frame types and sizes (0-9-1 §4.2.3, spec constants).")
	p("const (")
	for _, c := range s.Constants {
		if !isReply(c.Name, c.Class) {
			p("%s = %d // %s", camel(strings.ToLower(c.Name), false), c.Value, c.Name)
		}
	}
	p(")")
	p("")
	p("// Reply codes (spec constants). Soft errors close a channel, hard errors the connection; see Error.Hard.")
	p("const (")
	for _, c := range s.Constants {
		if isReply(c.Name, c.Class) {
			comment := c.Name
			if c.Class != "" {
				comment += ", " + c.Class
			}
			p("%s = %d // %s", camel(strings.ToLower(c.Name), false), c.Value, comment)
		}
	}
	p(")")
	p("")
	p("// Class ids.")
	p("const (")
	for _, c := range s.Classes {
		p("Class%s = %d", camel(c.Name, false), c.ID)
	}
	p(")")
	p("")
	p("// ReplyText returns the name of a reply code as RabbitMQ writes it at the")
	p("// start of a reply text (\"NOT_FOUND\"), or \"\" for an unknown code.")
	p("func ReplyText(code uint16) string {")
	p("switch code {")
	for _, c := range s.Constants {
		if isReply(c.Name, c.Class) {
			p("case %s: return %q", camel(strings.ToLower(c.Name), false), strings.ReplaceAll(c.Name, "-", "_"))
		}
	}
	p("}")
	p("return \"\"")
	p("}")
	p("")
	p("// softReply reports whether code is a soft-error (channel) reply code.")
	p("func softReply(code uint16) bool {")
	p("switch code {")
	var soft []string
	for _, c := range s.Constants {
		if c.Class == "soft-error" {
			soft = append(soft, camel(strings.ToLower(c.Name), false))
		}
	}
	p("case %s: return true", strings.Join(soft, ", "))
	p("}")
	p("return false")
	p("}")
	p("")

	// Method structs.
	for _, g := range methods {
		genStruct(p, g)
	}

	// Lookups.
	p("// methodName returns \"class.method\" for a known method, else \"\".")
	p("func methodName(classID, methodID uint16) string {")
	p("switch uint32(classID)<<16 | uint32(methodID) {")
	for _, g := range methods {
		p("case %s<<16 | %d: return %q", g.classConst, g.m.ID, g.fullName)
	}
	p("}")
	p("return \"\"")
	p("}")
	p("")
	p("// newMethod returns a new zero value of the method's type, or nil.")
	p("func newMethod(classID, methodID uint16) Method {")
	p("switch uint32(classID)<<16 | uint32(methodID) {")
	for _, g := range methods {
		p("case %s<<16 | %d: return new(%s)", g.classConst, g.m.ID, g.typeName)
	}
	p("}")
	p("return nil")
	p("}")
	p("")
	p("// methodValues holds one value per method type for MethodDecoder.")
	p("type methodValues struct {")
	for _, g := range methods {
		p("%s %s", lowerFirst(g.typeName), g.typeName)
	}
	p("}")
	p("")
	p("// get returns the stored value for the method, or nil.")
	p("func (v *methodValues) get(classID, methodID uint16) Method {")
	p("switch uint32(classID)<<16 | uint32(methodID) {")
	for _, g := range methods {
		p("case %s<<16 | %d: return &v.%s", g.classConst, g.m.ID, lowerFirst(g.typeName))
	}
	p("}")
	p("return nil")
	p("}")

	src, err := format.Source(w.Bytes())
	if err != nil {
		return nil, fmt.Errorf("gofmt generated code: %w\n%s", err, w.Bytes())
	}
	return src, nil
}

func isReply(name, class string) bool {
	return class != "" || strings.HasPrefix(name, "REPLY-")
}

func lowerFirst(s string) string { return strings.ToLower(s[:1]) + s[1:] }

func genStruct(p func(string, ...any), g genMethod) {
	desc := ""
	if g.m.Content {
		desc += " A content header and body follow it."
	}
	if g.m.Synchronous {
		desc += " It is synchronous: the peer answers it."
	}
	p("// %s is %s (class %d, method %d).%s", g.typeName, g.fullName, g.class.ID, g.m.ID, desc)
	p("type %s struct {", g.typeName)
	for _, f := range g.fields {
		p("%s %s%s", f.name, goTypes[f.typ], f.comment)
	}
	p("}")
	p("")
	recv := "(*" + g.typeName + ")"
	p("// ClassID returns %s.", g.classConst)
	p("func %s ClassID() uint16 { return %s }", recv, g.classConst)
	p("")
	p("// MethodID returns %d.", g.m.ID)
	p("func %s MethodID() uint16 { return %d }", recv, g.m.ID)
	p("")
	p("// Name returns %q.", g.fullName)
	p("func %s Name() string { return %q }", recv, g.fullName)
	p("")
	p("// HasContent returns %v.", g.m.Content)
	p("func %s HasContent() bool { return %v }", recv, g.m.Content)
	p("")
	p("// Synchronous returns %v.", g.m.Synchronous)
	p("func %s Synchronous() bool { return %v }", recv, g.m.Synchronous)
	p("")

	// AppendTo.
	p("// AppendTo appends class id, method id and arguments to b.")
	if len(g.fields) == 0 {
		p("func %s AppendTo(b []byte) []byte {", recv)
	} else {
		p("func (m *%s) AppendTo(b []byte) []byte {", g.typeName)
	}
	p("b = append(b, %d, %d, %d, %d)", g.class.ID>>8, g.class.ID&0xff, g.m.ID>>8, g.m.ID&0xff)
	declared := false
	forBitGroups(g.fields, func(f field) {
		p(encoders[f.typ], f.name)
	}, func(group []field) {
		if declared {
			p("bits = 0")
		} else {
			p("var bits uint8")
			declared = true
		}
		for i, f := range group {
			p("if m.%s { bits |= 1 << %d }", f.name, i)
		}
		p("b = append(b, bits)")
	})
	p("return b")
	p("}")
	p("")

	// Decode.
	p("// Decode decodes the arguments in p (the payload after the ids) into m.")
	if len(g.fields) == 0 {
		p("func %s Decode([]byte) error { return nil }", recv)
		p("")
		return
	}
	hasTable := false
	for _, f := range g.fields {
		hasTable = hasTable || f.typ == "table"
	}
	if hasTable {
		// Methods with field tables also decode under a smaller nesting
		// limit, for MethodDecoder.MaxTableDepth.
		p("func (m *%s) Decode(p []byte) error { return m.decodeDepth(p, 0) }", g.typeName)
		p("")
		p("// decodeDepth is Decode with field tables nested at most maxDepth deep (0: MaxTableDepth).")
		p("func (m *%s) decodeDepth(p []byte, maxDepth int) error {", g.typeName)
		p("d := decoder{b: p, maxDepth: maxDepth}")
	} else {
		p("func (m *%s) Decode(p []byte) error {", g.typeName)
		p("d := decoder{b: p}")
	}
	declared = false
	forBitGroups(g.fields, func(f field) {
		p(decoders[f.typ], f.name)
	}, func(group []field) {
		if declared {
			p("bits = d.uint8()")
		} else {
			p("bits := d.uint8()")
			declared = true
		}
		for i, f := range group {
			p("m.%s = bits&(1<<%d) != 0", f.name, i)
		}
	})
	p("return d.result(%s, %d)", g.classConst, g.m.ID)
	p("}")
	p("")
}

// forBitGroups walks fields in order, calling bitGroup for each run of
// consecutive bit fields (at most 8 per octet, least significant bit first,
// 0-9-1 §4.2.5.2) and one for every other field.
func forBitGroups(fields []field, one func(field), bitGroup func([]field)) {
	for i := 0; i < len(fields); {
		if fields[i].typ != "bit" {
			one(fields[i])
			i++
			continue
		}
		j := i
		for j < len(fields) && j-i < 8 && fields[j].typ == "bit" {
			j++
		}
		bitGroup(fields[i:j])
		i = j
	}
}
