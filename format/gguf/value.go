package gguf

import (
	"fmt"
	"math"
	"strconv"
)

// ValueType is the type tag of a metadata value, numbered as in the GGUF spec.
type ValueType uint32

// The metadata value types of GGUF v2/v3.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// scalarSize is the encoded size of each fixed-size scalar type; strings and
// arrays are variable and absent.
var scalarSize = map[ValueType]int{
	TypeUint8: 1, TypeInt8: 1, TypeUint16: 2, TypeInt16: 2, TypeUint32: 4,
	TypeInt32: 4, TypeFloat32: 4, TypeBool: 1, TypeUint64: 8, TypeInt64: 8,
	TypeFloat64: 8,
}

var typeNames = map[ValueType]string{
	TypeUint8: "u8", TypeInt8: "i8", TypeUint16: "u16", TypeInt16: "i16",
	TypeUint32: "u32", TypeInt32: "i32", TypeFloat32: "f32", TypeBool: "bool",
	TypeString: "str", TypeArray: "arr", TypeUint64: "u64", TypeInt64: "i64",
	TypeFloat64: "f64",
}

func (t ValueType) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Value is one metadata value. Scalars are held widened (integers as int64 or
// uint64, floats as float64); arrays keep their element type and hold a typed
// slice so that large tables (token lists, scores) stay compact.
type Value struct {
	Type ValueType
	// Elem is the element type when Type is TypeArray.
	Elem ValueType
	v    any
}

// Scalar constructors, used by the writer and by tests.

// U32 returns a uint32 value.
func U32(x uint32) Value { return Value{Type: TypeUint32, v: uint64(x)} }

// U16 returns a uint16 value.
func U16(x uint16) Value { return Value{Type: TypeUint16, v: uint64(x)} }

// I32 returns an int32 value.
func I32(x int32) Value { return Value{Type: TypeInt32, v: int64(x)} }

// U64 returns a uint64 value.
func U64(x uint64) Value { return Value{Type: TypeUint64, v: x} }

// F32 returns a float32 value.
func F32(x float32) Value { return Value{Type: TypeFloat32, v: float64(x)} }

// Bool returns a bool value.
func Bool(x bool) Value { return Value{Type: TypeBool, v: x} }

// Str returns a string value.
func Str(x string) Value { return Value{Type: TypeString, v: x} }

// Strs returns an array of strings.
func Strs(x []string) Value { return Value{Type: TypeArray, Elem: TypeString, v: x} }

// F32s returns an array of float32.
func F32s(x []float32) Value { return Value{Type: TypeArray, Elem: TypeFloat32, v: x} }

// Bools returns an array of bools.
func Bools(x []bool) Value { return Value{Type: TypeArray, Elem: TypeBool, v: x} }

// I32s returns an array of int32.
func I32s(x []int32) Value { return Value{Type: TypeArray, Elem: TypeInt32, v: x} }

// Raw returns the Go value: uint64, int64, float64, bool, string, or for
// arrays a typed slice ([]uint8, []int8, []uint16, []int16, []uint32,
// []int32, []float32, []bool, []string, []uint64, []int64, []float64, or
// []Value for arrays of arrays).
func (v Value) Raw() any { return v.v }

// Uint returns an integer value as uint64; negative values are an error.
func (v Value) Uint() (uint64, error) {
	switch x := v.v.(type) {
	case uint64:
		return x, nil
	case int64:
		if x < 0 {
			return 0, fmt.Errorf("negative value %d", x)
		}
		return uint64(x), nil
	}
	return 0, fmt.Errorf("want an integer, have %s", v.Type)
}

// Int returns an integer value as int64.
func (v Value) Int() (int64, error) {
	switch x := v.v.(type) {
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("value %d out of range", x)
		}
		return int64(x), nil
	case int64:
		return x, nil
	}
	return 0, fmt.Errorf("want an integer, have %s", v.Type)
}

// Float returns a numeric value as float64 (integers are converted).
func (v Value) Float() (float64, error) {
	switch x := v.v.(type) {
	case float64:
		return x, nil
	case uint64:
		return float64(x), nil
	case int64:
		return float64(x), nil
	}
	return 0, fmt.Errorf("want a number, have %s", v.Type)
}

// BoolValue returns a bool value.
func (v Value) BoolValue() (bool, error) {
	if b, ok := v.v.(bool); ok {
		return b, nil
	}
	return false, fmt.Errorf("want bool, have %s", v.Type)
}

// StringValue returns a string value.
func (v Value) StringValue() (string, error) {
	if s, ok := v.v.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("want str, have %s", v.Type)
}

// Len returns the element count of an array, or 0 for a scalar.
func (v Value) Len() int {
	switch x := v.v.(type) {
	case []uint8:
		return len(x)
	case []int8:
		return len(x)
	case []uint16:
		return len(x)
	case []int16:
		return len(x)
	case []uint32:
		return len(x)
	case []int32:
		return len(x)
	case []float32:
		return len(x)
	case []bool:
		return len(x)
	case []string:
		return len(x)
	case []uint64:
		return len(x)
	case []int64:
		return len(x)
	case []float64:
		return len(x)
	case []Value:
		return len(x)
	}
	return 0
}

// Strings returns an array of strings.
func (v Value) Strings() ([]string, error) {
	if s, ok := v.v.([]string); ok {
		return s, nil
	}
	return nil, fmt.Errorf("want arr[str], have %s", v.describe())
}

// Float32s returns an array of float32.
func (v Value) Float32s() ([]float32, error) {
	if s, ok := v.v.([]float32); ok {
		return s, nil
	}
	return nil, fmt.Errorf("want arr[f32], have %s", v.describe())
}

// Bools returns an array of bools.
func (v Value) Bools() ([]bool, error) {
	if s, ok := v.v.([]bool); ok {
		return s, nil
	}
	return nil, fmt.Errorf("want arr[bool], have %s", v.describe())
}

// Ints returns an array of any integer element type as int64s. Unsigned
// 64-bit values above MaxInt64 are an error.
func (v Value) Ints() ([]int64, error) {
	switch x := v.v.(type) {
	case []uint8:
		return widen(x), nil
	case []int8:
		return widen(x), nil
	case []uint16:
		return widen(x), nil
	case []int16:
		return widen(x), nil
	case []uint32:
		return widen(x), nil
	case []int32:
		return widen(x), nil
	case []int64:
		return append(make([]int64, 0, len(x)), x...), nil
	case []uint64:
		for _, e := range x {
			if e > math.MaxInt64 {
				return nil, fmt.Errorf("array element %d out of range", e)
			}
		}
		return widen(x), nil
	default:
		return nil, fmt.Errorf("want an integer array, have %s", v.describe())
	}
}

// widen converts integers that fit an int64 (the caller checks uint64s).
func widen[T uint8 | int8 | uint16 | int16 | uint32 | int32 | uint64](x []T) []int64 {
	out := make([]int64, len(x))
	for i, e := range x {
		out[i] = int64(e)
	}
	return out
}

func (v Value) describe() string {
	if v.Type == TypeArray {
		return "arr[" + v.Elem.String() + "]"
	}
	return v.Type.String()
}

// String formats the value for dumps; long arrays are abbreviated.
func (v Value) String() string {
	if v.Type == TypeArray {
		return fmt.Sprintf("arr[%s,%d]", v.Elem, v.Len())
	}
	switch x := v.v.(type) {
	case string:
		if len(x) > 60 {
			x = x[:60] + "…"
		}
		return fmt.Sprintf("%q", x)
	case float64:
		if v.Type == TypeFloat32 {
			return strconv.FormatFloat(x, 'g', -1, 32) // the shortest text that reads back as the stored float32
		}
	}
	return fmt.Sprint(v.v)
}
