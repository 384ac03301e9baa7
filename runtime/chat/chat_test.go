package chat

import (
	"testing"
)

func TestLlamaCppCases(t *testing.T) {
	for _, c := range llamaCppCases {
		t.Run(c.name, func(t *testing.T) {
			got, fb, err := Apply(c.template, llamaCppConversation, Options{AddGenerationPrompt: true, BOSToken: c.bos, EOSToken: c.eos})
			if err != nil {
				t.Fatal(err)
			}
			if fb {
				t.Error("fallback reported for a template")
			}
			if got != c.want {
				t.Errorf("got\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}
