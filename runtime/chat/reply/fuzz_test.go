package reply

import (
	"reflect"
	"testing"
)

// fuzzFormats are the formats FuzzStream picks from by index.
var fuzzFormats = []Format{
	{Kind: Plain},
	{Kind: Plain, ThinkStart: "<think>", ThinkEnd: "</think>"},
	{Kind: Hermes},
	{Kind: Hermes, ThinkStart: "<think>", ThinkEnd: "</think>"},
	{Kind: Llama3},
	{Kind: MistralNemo, CallIDs: true},
	{Kind: MistralArgs, CallIDs: true},
	{Kind: MistralArgs, ThinkStart: "[THINK]", ThinkEnd: "[/THINK]"},
	{Kind: Harmony},
	{Kind: Gemma4, ThinkStart: "<|channel>thought", ThinkEnd: "<channel|>"},
}

// FuzzStream checks that neither Parse nor a Stream panics on any text in
// any format, and that a Stream fed the text in three pieces cut anywhere
// adds up to Parse's result, with every call named and given an id in
// its first delta. The seed corpus is the TestParse table.
func FuzzStream(f *testing.F) {
	for _, c := range parseCases(f) {
		for i, ff := range fuzzFormats {
			if ff.Kind == c.f.Kind {
				f.Add(uint8(i), c.f.StartsInReasoning(), c.in, uint16(len(c.in)/3), uint16(len(c.in)/2))
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, open bool, text string, cut1, cut2 uint16) {
		ff := fuzzFormats[int(which)%len(fuzzFormats)].WithIDs(uint64(cut1))
		if open {
			ff = ff.AfterPrompt(ff.ThinkStart)
		}
		want := ff.Parse(text)
		i := min(int(cut1), len(text))
		j := min(max(int(cut2), i), len(text))
		s := ff.NewStream()
		ds := []Delta{s.Add(text[:i]), s.Add(text[i:j]), s.Add(text[j:]), s.Flush()}
		if got := collect(t, ds); !reflect.DeepEqual(got, want) {
			t.Fatalf("%v, cut at %d and %d:\nstream %+v\nparse  %+v", ff.Kind, i, j, got, want)
		}
		for k, c := range want.ToolCalls {
			if c.Name == "" || c.ID == "" {
				t.Fatalf("call %d without name or id: %+v", k, c)
			}
		}
	})
}
