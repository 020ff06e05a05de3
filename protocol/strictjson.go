package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// One reading of every signed payload. Go's encoding/json takes the last of two members
// with the same name and matches member names without regard to case, so {"amount":1,
// "AMOUNT":9} decodes, and another implementation may read it as 1 where Go reads 9.
// checkMemberNames refuses such payloads before they are decoded: within an object, no two
// member names may be equal or equal under case folding, and a member that fills a struct
// field must carry the field's exact name.

// checkMemberNames walks one JSON value with the type it decodes into (nil where the type
// says nothing: interfaces, types that decode themselves).
func checkMemberNames(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walkNames(dec, t, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// maxJSONDepth bounds the nesting of a payload: no record nests deeper than a few levels.
const maxJSONDepth = 32

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func walkNames(dec *json.Decoder, t reflect.Type, depth int) error {
	if depth > maxJSONDepth {
		return errors.New("JSON nested too deep")
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(unmarshalerType)) {
		t = nil // it decodes itself: check only for repeated names
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := walkNames(dec, elem, depth+1); err != nil {
				return err
			}
		}
	case '{':
		var fields map[string]reflect.Type
		var elem reflect.Type
		if t != nil {
			switch t.Kind() {
			case reflect.Struct:
				fields = fieldsOf(t)
			case reflect.Map:
				elem = t.Elem()
			}
		}
		seen := map[string]string{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			name, _ := kt.(string)
			folded := foldName(name)
			if prev, dup := seen[folded]; dup {
				if prev == name {
					return fmt.Errorf("member %q appears twice", name)
				}
				return fmt.Errorf("members %q and %q differ only in case", prev, name)
			}
			seen[folded] = name
			next := elem
			if fields != nil {
				ft, ok := fields[name]
				if !ok {
					return fmt.Errorf("unknown member %q (member names are case-sensitive)", name)
				}
				next = ft
			}
			if err := walkNames(dec, next, depth+1); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// foldName maps a member name to what encoding/json would match it with: the same
// letters in any case (the Kelvin sign and the long s fold to k and s there too).
func foldName(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		s = s[n:]
		switch r {
		case '\u212a': // Kelvin sign
			r = 'k'
		case '\u017f': // long s
			r = 's'
		}
		b.WriteString(strings.ToLower(string(r)))
	}
	return b.String()
}

var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

// fieldsOf lists the JSON member names of a struct type with their types, as
// encoding/json names them (tags, untagged embedded structs promoted).
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					add(ft)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, taken := m[name]; !taken {
				m[name] = f.Type
			}
		}
	}
	add(t)
	fieldCache.Store(t, m)
	return m
}
