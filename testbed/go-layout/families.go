package main

// The HTTP/2 client implementations a Go binary can link, by the names the
// agent uses for them. net/http's bundled copy (h2_bundle.go) renames every
// type with an "http2" prefix; golang.org/x/net/http2 and Go 1.27's
// net/http/internal/http2 keep the plain names.
type family struct {
	name string
	// pkg is the package path the symbols start with.
	pkg string
	// typePrefix is what the bundle puts before each type name.
	typePrefix string
}

var families = []family{
	{name: "std", pkg: "net/http", typePrefix: "http2"},
	{name: "x/net", pkg: "golang.org/x/net/http2", typePrefix: ""},
	{name: "internal", pkg: "net/http/internal/http2", typePrefix: ""},
}

// typeName is the DWARF name of one of the family's types, e.g.
// "net/http.http2ClientConn".
func (f family) typeName(name string) string {
	return f.pkg + "." + f.typePrefix + name
}

// memberName is how a struct names a field that embeds one of the family's
// types: by the type's unqualified name ("http2FrameHeader").
func (f family) memberName(name string) string {
	return f.typePrefix + name
}

// probedFunctions are the functions the agent's uprobes hook, by its names for
// them (agent/src/sources/goBinary/http2Families.ts), as receiver and method.
var probedFunctions = []struct{ role, receiver, method string }{
	{"encodeAndWriteHeaders", "clientStream", "encodeAndWriteHeaders"},
	{"processHeaders", "clientConnReadLoop", "processHeaders"},
	{"processResetStream", "clientConnReadLoop", "processResetStream"},
	{"processGoAway", "clientConnReadLoop", "processGoAway"},
	{"cleanup", "clientConnReadLoop", "cleanup"},
	{"writeStreamReset", "ClientConn", "writeStreamReset"},
}

// symbol is the function's name in the pclntab and in DWARF, e.g.
// "golang.org/x/net/http2.(*ClientConn).writeStreamReset".
func (f family) symbol(receiver, method string) string {
	return f.pkg + ".(*" + f.typePrefix + receiver + ")." + method
}
