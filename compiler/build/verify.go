package build

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/zrtdev/zrt/format/buildcache"
	"github.com/zrtdev/zrt/format/bundle"
	"github.com/zrtdev/zrt/format/bundleset"
	"github.com/zrtdev/zrt/format/bytesize"
	"github.com/zrtdev/zrt/kernels"
)

// Verify checks the bundle or bundle set at path fully (zrtc verify): a
// bundle opened with every check, then every variant's packet stream
// against its kernels' ABIs (kernels.CheckBundle); a set's index, each
// member against it, and each member so. say (nil: quiet) hears what
// each bundle held.
func Verify(path string, say func(format string, a ...any)) error {
	dirs := []string{path}
	if bundleset.IsSet(path) {
		x, err := bundleset.Read(path)
		if err != nil {
			return err
		}
		dirs = nil
		for _, m := range x.Bundles {
			if err := bundleset.VerifyMember(path, m); err != nil {
				return err
			}
			dirs = append(dirs, m.Path(path))
		}
	}
	for _, dir := range dirs {
		b, err := bundle.Open(dir, true)
		if err != nil {
			return err
		}
		g := b.Graph
		dispatches, err := kernels.CheckBundle(g)
		b.Close()
		if err != nil {
			return fmt.Errorf("bundle %s: %w", dir, err)
		}
		if say != nil {
			say("%s: %d variants (%d dispatches), %d kernels, %d regions, weights hash verified",
				dir, len(g.Variants), dispatches, len(g.Kernels), len(g.Regions))
		}
	}
	return nil
}

// ListCache prints the entries of cache c, least recently used first,
// with size, last use, target and model, and their total.
func ListCache(w io.Writer, c *buildcache.Cache) error {
	es, err := c.List()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "key\tsize\tlast used\ttarget\tmodel")
	var total int64
	for _, e := range es {
		total += e.Bytes
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Key, bytesize.Format(e.Bytes), e.LastUsed.Format(time.DateTime), e.Target, e.Source)
	}
	tw.Flush()
	_, err = fmt.Fprintf(w, "%d entries, %s\n", len(es), bytesize.Format(total))
	return err
}

// PruneCache removes cache c's least recently used entries until it
// holds at most max bytes, printing each removed entry and what is left.
func PruneCache(w io.Writer, c *buildcache.Cache, max int64) error {
	removed, err := c.Prune(max)
	for _, e := range removed {
		fmt.Fprintf(w, "removed %s  %s  %s %s\n", e.Key, bytesize.Format(e.Bytes), e.Target, e.Source)
	}
	if err != nil {
		return err
	}
	kept, err := c.List()
	if err != nil {
		return err
	}
	var n int64
	for _, e := range kept {
		n += e.Bytes
	}
	_, err = fmt.Fprintf(w, "removed %d entries; %d left, %s\n", len(removed), len(kept), bytesize.Format(n))
	return err
}
