// Package optflag holds the flag values the commands share that tell a
// flag left out from one given its zero value, which pflag's own types
// cannot: zrtc build --draft-layers 0 builds no draft variant, while
// leaving the flag out keeps the config's setting or its default.
package optflag

import (
	"errors"
	"strconv"
)

// Int is a flag value of a count, 0 or more, kept in *P: nil until the
// flag is given. Its help shows no default, which the flag's own text
// describes.
type Int struct{ P **int }

// Set parses s, refusing a negative count.
func (v Int) Set(s string) error {
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return errors.New("want a whole number")
	case n < 0:
		return errors.New("want 0 or more")
	}
	*v.P = &n
	return nil
}

// String is the count given, "" until one is.
func (v Int) String() string {
	if v.P == nil || *v.P == nil {
		return ""
	}
	return strconv.Itoa(**v.P)
}

// Type names the value in the help, as pflag's int does.
func (v Int) Type() string { return "int" }
