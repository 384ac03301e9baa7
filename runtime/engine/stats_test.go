package engine_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/zrtdev/zrt/runtime/engine"
)

// TestStatsAdd holds Stats.Add to every field of Stats, as fields are
// added: a snapshot whose every number, map entry and slice element is
// set, added to itself, has each of them doubled, the same LastStep and
// the same draft error. A field Add forgets stays single and fails here.
func TestStatsAdd(t *testing.T) {
	var s engine.Stats
	fill(t, reflect.ValueOf(&s).Elem(), "Stats")
	s.LastStep = time.Unix(1700000000, 0)
	s.Finished = map[engine.Finish]uint64{"stop": 3, "length": 5}
	s.SpecAcceptedAt = []uint64{7, 2}
	s.SpecDraftError = "draft step failed"
	got := s.Add(s)
	check(t, reflect.ValueOf(got), reflect.ValueOf(s), "Stats")
	later := s
	later.LastStep = s.LastStep.Add(time.Second)
	if !s.Add(later).LastStep.Equal(later.LastStep) || !later.Add(s).LastStep.Equal(later.LastStep) {
		t.Error("Add keeps the earlier LastStep")
	}
}

// fill sets every number of v (a struct, recursively) to 1.
func fill(t *testing.T, v reflect.Value, path string) {
	for i := range v.NumField() {
		f, name := v.Field(i), path+"."+v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(1)
		case reflect.Uint64:
			f.SetUint(1)
		case reflect.Float64:
			f.SetFloat(1)
		case reflect.Struct:
			if f.Type() != reflect.TypeFor[time.Time]() {
				fill(t, f, name)
			}
		case reflect.Map, reflect.Slice, reflect.String:
		default:
			t.Fatalf("%s: a %s, which TestStatsAdd does not know how to add", name, f.Kind())
		}
	}
}

// check reports each field of got (a struct, recursively) that is not
// twice one's, or the same for times and strings.
func check(t *testing.T, got, one reflect.Value, path string) {
	for i := range got.NumField() {
		g, o, name := got.Field(i), one.Field(i), path+"."+got.Type().Field(i).Name
		var ok bool
		switch g.Kind() {
		case reflect.Int, reflect.Int64:
			ok = g.Int() == 2*o.Int()
		case reflect.Uint64:
			ok = g.Uint() == 2*o.Uint()
		case reflect.Float64:
			ok = g.Float() == 2*o.Float()
		case reflect.Map:
			ok = g.Len() == o.Len()
			for _, k := range o.MapKeys() {
				ok = ok && g.MapIndex(k).Uint() == 2*o.MapIndex(k).Uint()
			}
		case reflect.Slice:
			ok = g.Len() == o.Len()
			for j := 0; ok && j < o.Len(); j++ {
				ok = g.Index(j).Uint() == 2*o.Index(j).Uint()
			}
		case reflect.String:
			ok = g.String() == o.String()
		case reflect.Struct:
			if g.Type() == reflect.TypeFor[time.Time]() {
				ok = g.Interface().(time.Time).Equal(o.Interface().(time.Time))
			} else {
				check(t, g, o, name)
				continue
			}
		}
		if !ok {
			t.Errorf("%s: %v added to itself gives %v", name, o, g)
		}
	}
}
