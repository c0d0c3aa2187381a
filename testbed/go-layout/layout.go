package main

import (
	"debug/dwarf"
	"fmt"
)

// layout holds byte offsets keyed by what the probe reads, each as the probe
// adds it to the pointer it holds (agent/src/sources/goHttp2/goProbeProgram.ts):
// "ClientConn.tconn.data" is where cc.tconn's data word is from cc, the
// number the probe writes as `$cc + 16`. What cannot be found is in missing,
// with the reason, and never given a number.
type layout struct {
	Offsets map[string]int64  `json:"offsets"`
	Missing map[string]string `json:"missing"`
}

func newLayout() layout {
	return layout{Offsets: map[string]int64{}, Missing: map[string]string{}}
}

func (l layout) set(key string, offset int64, err error) {
	if err != nil {
		l.Missing[key] = err.Error()
		return
	}
	l.Offsets[key] = offset
}

// at records the offset of a field path within the named type.
func (l layout) at(ix *dwarfIndex, key, typeName string, path ...string) dwarf.Type {
	t, err := ix.named(typeName)
	if err != nil {
		l.set(key, 0, err)
		return nil
	}
	return l.within(key, t, typeName, path...)
}

// within records the offset of a field path within `t` and returns the
// field's type (nil when missing). A nil `t` is reported as missing, found
// from `from` (e.g. "MetaHeadersFrame.Fields"), itself missing.
func (l layout) within(key string, t dwarf.Type, from string, path ...string) dwarf.Type {
	if t == nil {
		l.set(key, 0, fmt.Errorf("the type found from %s is missing", from))
		return nil
	}
	offset, fieldType, err := fieldPath(t, path...)
	l.set(key, offset, err)
	return fieldType
}

// familyLayout is what the probes read in the family's own types, and in the
// types those lead to (the request, its URL, the header fields).
func familyLayout(ix *dwarfIndex, f family) layout {
	l := newLayout()
	l.at(ix, "clientStream.cc", f.typeName("clientStream"), "cc")
	l.at(ix, "clientStream.ID", f.typeName("clientStream"), "ID")
	l.at(ix, "ClientConn.tconn.data", f.typeName("ClientConn"), "tconn", "data")
	l.at(ix, "clientConnReadLoop.cc", f.typeName("clientConnReadLoop"), "cc")
	l.at(ix, "MetaHeadersFrame.HeadersFrame", f.typeName("MetaHeadersFrame"), f.memberName("HeadersFrame"))
	fields := l.at(ix, "MetaHeadersFrame.Fields", f.typeName("MetaHeadersFrame"), "Fields")
	l.at(ix, "MetaHeadersFrame.Fields.len", f.typeName("MetaHeadersFrame"), "Fields", "len")
	l.at(ix, "HeadersFrame.StreamID", f.typeName("HeadersFrame"), f.memberName("FrameHeader"), "StreamID")
	l.at(ix, "RSTStreamFrame.StreamID", f.typeName("RSTStreamFrame"), f.memberName("FrameHeader"), "StreamID")
	l.at(ix, "RSTStreamFrame.ErrCode", f.typeName("RSTStreamFrame"), "ErrCode")
	l.at(ix, "GoAwayFrame.LastStreamID", f.typeName("GoAwayFrame"), "LastStreamID")
	l.at(ix, "GoAwayFrame.ErrCode", f.typeName("GoAwayFrame"), "ErrCode")

	// The header field type is whatever Fields holds: the family's own hpack
	// (vendored into the standard library for std and internal).
	headerField := elementOf(fields)
	l.within("HeaderField.Name", headerField, "MetaHeadersFrame.Fields", "Name")
	l.within("HeaderField.Value", headerField, "MetaHeadersFrame.Fields", "Value")

	// The request is whatever encodeAndWriteHeaders takes second (after its receiver):
	// *http.Request, or Go 1.27's *ClientRequest in net/http/internal/http2.
	request, err := requestType(ix, f)
	if err != nil {
		for _, key := range []string{"request.Method", "request.URL", "url.URL.Path"} {
			l.set(key, 0, err)
		}
		return l
	}
	l.within("request.Method", request, "encodeAndWriteHeaders's req", "Method")
	var url dwarf.Type
	if urlField := l.within("request.URL", request, "encodeAndWriteHeaders's req", "URL"); urlField != nil {
		url, _ = pointee(urlField)
	}
	l.within("url.URL.Path", url, "request.URL", "Path")
	return l
}

// elementOf is the element type of a slice type (nil when it is not one).
func elementOf(slice dwarf.Type) dwarf.Type {
	if slice == nil {
		return nil
	}
	_, array, err := fieldPath(slice, "array")
	if err != nil {
		return nil
	}
	element, err := pointee(array)
	if err != nil {
		return nil
	}
	return element
}

func requestType(ix *dwarfIndex, f family) (dwarf.Type, error) {
	symbol := f.symbol("clientStream", "encodeAndWriteHeaders")
	params, ok := ix.params[symbol]
	if !ok {
		return nil, fmt.Errorf("%s not in DWARF", symbol)
	}
	if len(params) < 2 {
		return nil, fmt.Errorf("%s takes no request: %v", symbol, params)
	}
	pointer, err := ix.named(params[1].Type)
	if err != nil {
		return nil, err
	}
	return pointee(pointer)
}

// familyTypes are the family's types the probes read into; their sizes are
// no read of the probe's, but they tell one release's layout from another's
// where the fields read stay put.
var familyTypes = []string{"ClientConn", "clientStream", "clientConnReadLoop", "MetaHeadersFrame", "HeadersFrame", "RSTStreamFrame", "GoAwayFrame"}

// typeSizes maps each of the family's types DWARF describes to its size in bytes.
func typeSizes(ix *dwarfIndex, f family) map[string]int64 {
	sizes := map[string]int64{}
	for _, name := range familyTypes {
		if t, err := ix.named(f.typeName(name)); err == nil {
			sizes[name] = t.Size()
		}
	}
	return sizes
}

// socketLayout is the chain from a *tls.Conn to its descriptor, the same
// for every family: tls.Conn.conn (a net.Conn, its data word a *net.TCPConn),
// whose embedded conn's fd is a *netFD, whose poll.FD holds Sysfd.
func socketLayout(ix *dwarfIndex) layout {
	l := newLayout()
	l.at(ix, "tls.Conn.conn.data", "crypto/tls.Conn", "conn", "data")
	l.at(ix, "net.TCPConn.fd", "net.TCPConn", "conn", "fd")
	l.at(ix, "net.netFD.pfd.Sysfd", "net.netFD", "pfd", "Sysfd")
	return l
}
