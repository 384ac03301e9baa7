// Package support names the one kind of error for input that is valid but
// that zrt does not handle yet: a tensor type with no kernels on the
// target, an architecture with no graph builder, a config feature with no
// implementation. It is distinct from "malformed" (each format's
// ErrFormat), which is reserved for files that break their format.
//
// Test suites that walk every shared model skip a model only on this
// error, so a file that zrt should read but misreads still fails them.
package support

import "errors"

// ErrUnsupported is matched by errors.Is for every *Error.
var ErrUnsupported = errors.New("unsupported")

// Error reports one unsupported feature of otherwise valid input. It reads
// "unsupported <What> <Value> <Where>: <Detail>", for example
//
//	unsupported tensor type IQ4_XS (id 23) in blk.0.ffn_down.weight
//	unsupported architecture "gemma3"
//	unsupported rope scaling "yarn" (mistral3.rope.scaling.type)
type Error struct {
	// What is the kind of feature: "tensor type", "architecture",
	// "rope scaling", …
	What string
	// Value is the feature as the input names it.
	Value string
	// Where locates it, phrased to follow the value: "in TENSOR" or
	// "(METADATA KEY)". Optional.
	Where string
	// Detail says what zrt supports instead or what to do. Optional.
	Detail string
}

func (e *Error) Error() string {
	s := "unsupported " + e.What + " " + e.Value
	if e.Where != "" {
		s += " " + e.Where
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes errors.Is(err, ErrUnsupported) true for every *Error.
func (e *Error) Is(target error) bool { return target == ErrUnsupported }

// In phrases a tensor or field name for Where.
func In(name string) string { return "in " + name }

// Key phrases a metadata key or config field for Where.
func Key(key string) string { return "(" + key + ")" }

// Is reports whether err is, or wraps, an unsupported-feature error.
func Is(err error) bool { return errors.Is(err, ErrUnsupported) }
