package engine

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/zrtdev/zrt/runtime/spec/draft"
)

// speculativeFlag runs every test of the package with engines that
// speculate (go test ./runtime/engine/ -args -speculative ngram:4:fixed):
// each engine a test makes without speculation, on a model that can
// speculate, drafts as the mode says, and every test must pass as it
// does without.
var speculativeFlag = flag.String("speculative", "", "run every engine with this speculative mode (off, ngram[:K[:fixed]], self[:K[:fixed]])")

func TestMain(m *testing.M) {
	flag.Parse()
	if *speculativeFlag != "" {
		sp, err := ParseSpeculation(*speculativeFlag)
		if err != nil {
			fmt.Fprintln(os.Stderr, "-speculative:", err)
			os.Exit(2)
		}
		if sp.On() {
			testHookSpeculative = func() (Speculation, draft.Drafter) { return sp, nil }
		}
	}
	os.Exit(m.Run())
}
