package main

import (
	"debug/elf"
	"debug/gosym"
	"fmt"
)

// pclntabFunctions is every function name in the binary's pclntab: the table
// the runtime itself uses, kept by -s -w, so it says what a stripped binary
// contains as well.
func pclntabFunctions(f *elf.File) (map[string]bool, error) {
	pclntab := f.Section(".gopclntab")
	text := f.Section(".text")
	if pclntab == nil || text == nil {
		return nil, fmt.Errorf("no .gopclntab or .text section")
	}
	data, err := pclntab.Data()
	if err != nil {
		return nil, err
	}
	table, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, fn := range table.Funcs {
		names[fn.Name] = true
	}
	return names, nil
}
