// go-layout prints, as JSON, the ground truth for what lostwrite's HTTP/2
// uprobes read in a Go binary: for every HTTP/2 client family the binary
// links, which probed functions it contains (from the pclntab), their
// parameters (from DWARF, so a changed signature shows) and the byte offsets
// of the struct fields the probe program reads (from DWARF). The agent reads
// those fields at fixed offsets; this is what they are checked against.
//
//	go-layout BINARY
//
// Built from its own module with the standard library only, so it builds
// offline with any recent toolchain. DWARF is needed for offsets and
// signatures (a binary linked with -w has none: they are reported missing).
package main

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
)

type familyReport struct {
	// Functions maps each probed role to its symbol, for those the pclntab holds.
	Functions map[string]string `json:"functions"`
	// Absent lists the probed roles whose function the binary lacks.
	Absent []string `json:"absent"`
	// Signatures maps each role to its parameters, for those DWARF describes.
	Signatures map[string][]param `json:"signatures"`
	// Sizes maps the family's struct types to their sizes, for those DWARF describes.
	Sizes map[string]int64 `json:"sizes"`
	layout
}

type report struct {
	Binary    string                   `json:"binary"`
	GoVersion string                   `json:"goVersion,omitempty"`
	XNet      string                   `json:"xNet,omitempty"`
	DWARF     bool                     `json:"dwarf"`
	Families  map[string]*familyReport `json:"families"`
	Socket    layout                   `json:"socket"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go-layout BINARY")
		os.Exit(2)
	}
	r, err := inspect(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-layout:", err)
		os.Exit(1)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	if err := out.Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "go-layout:", err)
		os.Exit(1)
	}
}

func inspect(path string) (*report, error) {
	file, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	r := &report{Binary: path, Families: map[string]*familyReport{}}
	if info, err := buildinfo.ReadFile(path); err == nil {
		r.GoVersion = info.GoVersion
		for _, dep := range info.Deps {
			if dep.Path == "golang.org/x/net" {
				r.XNet = dep.Version
			}
		}
	}
	functions, err := pclntabFunctions(file)
	if err != nil {
		return nil, fmt.Errorf("reading the pclntab: %w", err)
	}

	wanted := map[string]bool{}
	for _, f := range families {
		for _, p := range probedFunctions {
			wanted[f.symbol(p.receiver, p.method)] = true
		}
	}
	var ix *dwarfIndex
	if data, err := file.DWARF(); err == nil {
		if ix, err = indexDwarf(data, wanted); err != nil {
			return nil, fmt.Errorf("reading DWARF: %w", err)
		}
		r.DWARF = true
	}

	noDwarf := newLayout()
	noDwarf.Missing["*"] = "the binary has no DWARF"
	r.Socket = noDwarf
	if ix != nil {
		r.Socket = socketLayout(ix)
	}
	for _, f := range families {
		fr := &familyReport{Functions: map[string]string{}, Absent: []string{}, Signatures: map[string][]param{}, Sizes: map[string]int64{}, layout: noDwarf}
		for _, p := range probedFunctions {
			symbol := f.symbol(p.receiver, p.method)
			if functions[symbol] {
				fr.Functions[p.role] = symbol
			} else {
				fr.Absent = append(fr.Absent, p.role)
			}
			if ix != nil {
				if params, ok := ix.params[symbol]; ok {
					fr.Signatures[p.role] = params
				}
			}
		}
		// A family is present when the binary holds any of its probed
		// functions (present but incomplete is worth seeing). Its types alone
		// do not count: Go 1.27's net/http keeps an http2ClientConn of its
		// own, a wrapper, while its HTTP/2 code is net/http/internal/http2.
		if len(fr.Functions) == 0 {
			continue
		}
		if ix != nil {
			fr.layout = familyLayout(ix, f)
			fr.Sizes = typeSizes(ix, f)
		}
		r.Families[f.name] = fr
	}
	return r, nil
}
