package main

import (
	"debug/dwarf"
	"fmt"
)

// dwarfIndex finds named types and the parameters of named functions in a
// binary's DWARF. One pass over the entries records where each named type
// is; types are decoded only when asked for, since a binary holds tens of
// thousands and a few are needed.
type dwarfIndex struct {
	data  *dwarf.Data
	types map[string]dwarf.Offset
	// params holds the functions asked for at indexing that DWARF describes.
	params map[string][]param
}

type param struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

func indexDwarf(data *dwarf.Data, functions map[string]bool) (*dwarfIndex, error) {
	ix := &dwarfIndex{data: data, types: map[string]dwarf.Offset{}, params: map[string][]param{}}
	r := data.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			return ix, nil
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		switch e.Tag {
		case dwarf.TagCompileUnit:
			continue // its children are the entries wanted
		case dwarf.TagStructType, dwarf.TagTypedef, dwarf.TagPointerType, dwarf.TagBaseType:
			if _, seen := ix.types[name]; name != "" && !seen {
				ix.types[name] = e.Offset
			}
		case dwarf.TagSubprogram:
			// A function inlined somewhere is described once, abstractly,
			// with its name and parameters; its out-of-line copy only points
			// there. Either way the named entry carries the parameters.
			if functions[name] && e.Children {
				params, err := ix.readParams(r)
				if err != nil {
					return nil, fmt.Errorf("parameters of %s: %w", name, err)
				}
				ix.params[name] = params
				continue
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
}

// readParams reads a subprogram's children up to its end and keeps its
// formal parameters, in order. Results are formal parameters too, marked as
// variable parameters: they are left out, being no input the probes read.
func (ix *dwarfIndex) readParams(r *dwarf.Reader) ([]param, error) {
	params := []param{}
	for {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil || e.Tag == 0 {
			return params, nil
		}
		if e.Tag == dwarf.TagFormalParameter {
			if isResult, _ := e.Val(dwarf.AttrVarParam).(bool); !isResult {
				name, _ := e.Val(dwarf.AttrName).(string)
				params = append(params, param{Name: name, Type: ix.typeNameAt(e)})
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
}

func (ix *dwarfIndex) typeNameAt(e *dwarf.Entry) string {
	off, ok := e.Val(dwarf.AttrType).(dwarf.Offset)
	if !ok {
		return "?"
	}
	t, err := ix.data.Type(off)
	if err != nil {
		return "?"
	}
	return typeName(t)
}

// typeName is the Go name DWARF gives a type ("*net/http.Request").
func typeName(t dwarf.Type) string {
	if s, ok := t.(*dwarf.StructType); ok && s.StructName != "" {
		return s.StructName
	}
	if name := t.Common().Name; name != "" {
		return name
	}
	return t.String()
}

// named decodes the type called `name`; an error says it is not there.
func (ix *dwarfIndex) named(name string) (dwarf.Type, error) {
	off, ok := ix.types[name]
	if !ok {
		return nil, fmt.Errorf("type %s not in DWARF", name)
	}
	return ix.data.Type(off)
}

// structOf sees through typedefs (Go describes an interface as a typedef of
// runtime.iface) to the struct beneath.
func structOf(t dwarf.Type) (*dwarf.StructType, error) {
	for {
		switch v := t.(type) {
		case *dwarf.StructType:
			return v, nil
		case *dwarf.TypedefType:
			t = v.Type
		default:
			return nil, fmt.Errorf("%s is not a struct", typeName(t))
		}
	}
}

// pointee is what a pointer type points at.
func pointee(t dwarf.Type) (dwarf.Type, error) {
	for {
		switch v := t.(type) {
		case *dwarf.PtrType:
			return v.Type, nil
		case *dwarf.TypedefType:
			t = v.Type
		default:
			return nil, fmt.Errorf("%s is not a pointer", typeName(t))
		}
	}
}

// fieldPath walks embedded or nested struct fields from `t` (no pointer is
// followed: the offsets add up within one block of memory) and returns the
// offset of the last one from the start of `t`, and its type.
func fieldPath(t dwarf.Type, path ...string) (int64, dwarf.Type, error) {
	var offset int64
	for _, name := range path {
		s, err := structOf(t)
		if err != nil {
			return 0, nil, err
		}
		field := findField(s, name)
		if field == nil {
			return 0, nil, fmt.Errorf("%s has no field %s", typeName(t), name)
		}
		offset += field.ByteOffset
		t = field.Type
	}
	return offset, t, nil
}

func findField(s *dwarf.StructType, name string) *dwarf.StructField {
	for _, f := range s.Field {
		if f.Name == name {
			return f
		}
	}
	return nil
}
