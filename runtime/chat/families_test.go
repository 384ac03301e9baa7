package chat

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// familyCase is one entry of testdata/families.json: a model family's real
// chat template (Template is the text of llama.cpp's
// models/templates/<TemplateFile>), the BOS/EOS text of that family's
// tokenizer, a conversation, and the prompt llama.cpp rendered for it.
type familyCase struct {
	Name         string    `json:"name"`
	TemplateFile string    `json:"template_file"`
	Template     string    `json:"template"`
	BOS          string    `json:"bos"`
	EOS          string    `json:"eos"`
	Messages     []Message `json:"messages"`
	Want         string    `json:"want"`
}

// TestFamilies renders the chat templates of newer model families (Gemma 2
// and 4, Qwen 2.5, 3 and 3.5, gpt-oss, Phi-3.5, Ministral 3, Mistral Small
// 3.2, and Llama 3.1 for its date_string) and requires Apply's prompt to
// equal llama.cpp's byte for byte. Each is run on llamaCppConversation and
// on a lone "Hello"; two more Gemma 2 cases cover the system-message
// polyfill (a lone system message, a system message after the first turn).
//
// The wants in testdata/families.json came from llama.cpp at commit
// 2369b110d057cda00732e679ba661afd8973adea via common_chat_templates_apply
// (the --jinja path): common_chat_templates_init with no model, the
// template text as override and the case's BOS/EOS text, then
// use_jinja=true and add_generation_prompt=true, with the clock fixed at
// the file's "now" (TZ=UTC) for strftime_now, datetime and date_string.
// Without a model llama.cpp sees add_bos=add_eos=false and so leaves a BOS
// or EOS the template writes in the prompt; the test asks Apply for the
// same with KeepBOS and KeepEOS. enable_thinking is llama.cpp's default
// (true).
func TestFamilies(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "families.json"))
	if err != nil {
		t.Fatal(err)
	}
	var data struct {
		Commit string       `json:"llama_cpp_commit"`
		Now    time.Time    `json:"now"`
		Cases  []familyCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	if len(data.Cases) == 0 {
		t.Fatal("no cases")
	}
	defer func(f func() time.Time) { now = f }(now)
	now = func() time.Time { return data.Now }
	for _, c := range data.Cases {
		t.Run(c.Name, func(t *testing.T) {
			opt := Options{AddGenerationPrompt: true, BOSToken: c.BOS, EOSToken: c.EOS, KeepBOS: true, KeepEOS: true}
			got, fb, err := Apply(c.Template, c.Messages, opt)
			if err != nil {
				t.Fatalf("%s: %v", c.TemplateFile, err)
			}
			if fb {
				t.Error("fallback reported for a template")
			}
			if got != c.Want {
				t.Errorf("%s: Apply differs from llama.cpp %.10s\n%s", c.TemplateFile, data.Commit, textDiff(got, c.Want))
			}
		})
	}
}

// textDiff describes where got departs from want: the byte offset, the
// lines around the first differing line from both, and both tails quoted.
func textDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	line := strings.Count(got[:i], "\n")
	var sb strings.Builder
	fmt.Fprintf(&sb, "first difference at byte %d (line %d); got %d bytes, want %d\n", i, line+1, len(got), len(want))
	from := max(line-2, 0)
	show := func(tag string, ls []string) {
		for n := from; n < len(ls) && n <= line+2; n++ {
			mark := " "
			if n == line {
				mark = ">"
			}
			fmt.Fprintf(&sb, "%s %s %4d | %q\n", tag, mark, n+1, ls[n])
		}
	}
	show("got ", gl)
	show("want", wl)
	tail := func(s string) string {
		if len(s) > 200 {
			return s[:200] + "..."
		}
		return s
	}
	fmt.Fprintf(&sb, "got  from there: %q\nwant from there: %q", tail(got[i:]), tail(want[i:]))
	return sb.String()
}
