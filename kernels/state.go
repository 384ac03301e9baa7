package kernels

import (
	"fmt"

	"github.com/zrtdev/zrt/asm/pm4"
	"github.com/zrtdev/zrt/format/bundle"
)

// PersistentKernel names the kernel a bundle may carry after its
// instances for the megakernel schedules of its graph file (T-CUDA's
// persistent decode kernel): not an instance of the catalog, and named by
// no dispatch.
const PersistentKernel = "megakernel"

// CheckBundle is the check of meaning that the loader and zrtc verify
// share, after bundle.Graph.Check: the state regions (CheckState), and
// every variant's packet stream against the kernel ABIs with pm4.Check —
// program and user data set for every dispatch as its kernel requires,
// each address a relocation inside its region, the dispatch count the
// graph file records, a barrier and the fence at the end. It reports the
// total dispatches.
func CheckBundle(g *bundle.Graph) (dispatches int, err error) {
	if err := CheckState(g); err != nil {
		return 0, err
	}
	var names, kernelNames []string
	var sizes []int64
	for _, r := range g.Regions {
		names, sizes = append(names, r.Name), append(sizes, r.Bytes)
	}
	kv, err := BundleKV(&g.Hparams)
	if err != nil {
		return 0, err
	}
	for i, k := range g.Kernels {
		if k.Name == PersistentKernel && i == len(g.Kernels)-1 && len(g.Schedules) > 0 {
			// The persistent decode kernel a build with megakernel = true
			// carries after the instances: no dispatch names it, and
			// leaving it out of the stream's kernels holds every stream to
			// that.
			break
		}
		kernelNames = append(kernelNames, k.Name)
		// A kernel that addresses the cache must address the layout the
		// hyperparameters (and so the page sizes) say it has.
		if a, _, err := SplitInstance(k.Name); err == nil && a.KVTyped {
			if got, err := InstanceKV(k.Name); err != nil || got != kv {
				return 0, fmt.Errorf("kernel %s addresses a %v cache, the bundle's is %v", k.Name, got, kv)
			}
		}
	}
	env, err := StreamEnv(names, sizes, kernelNames)
	if err != nil {
		return 0, err
	}
	for i := range g.Variants {
		v := &g.Variants[i]
		st, err := pm4.Check(v.Words, v.Relocs, env)
		if err != nil {
			return 0, fmt.Errorf("variant %d (%s): %w", i, v.Key(), err)
		}
		if st.Dispatches != int(v.Dispatches) {
			return 0, fmt.Errorf("variant %d (%s): the stream has %d dispatches, the graph file says %d", i, v.Key(), st.Dispatches, v.Dispatches)
		}
		dispatches += st.Dispatches
	}
	return dispatches, nil
}

// CheckState checks that a bundle's memory plan has every region the
// kernel ABI and the runtime address by name, each as large as the
// hyperparameters make them need: the request table, the outputs, the
// fence, at least one KV page, and scratch for every variant. The loader
// and zrtc verify run it after bundle.Graph.Check, so a graph file whose
// checksums are valid but whose numbers were edited is refused, naming
// the region, instead of indexing past a buffer.
func CheckState(g *bundle.Graph) error {
	h := &g.Hparams
	if _, err := BundleKV(h); err != nil {
		return err
	}
	size := map[string]int64{}
	for _, r := range g.Regions {
		size[r.Name] = r.Bytes
	}
	var maxScratch int64
	for _, v := range g.Variants {
		maxScratch = max(maxScratch, v.ScratchBytes)
	}
	type region = struct {
		region string
		bytes  int64
		what   string
	}
	need := []region{
		{RegionIO, 4 * int64(NewRequestTable(h.PrefillChunk, h.MaxSlots, h.MaxPages).Words()), "the request table"},
		{RegionLogits, 4 * int64(h.MaxSlots) * int64(h.NVocab), "max_slots × n_vocab logits"},
		{RegionTokens, 4 * int64(h.MaxSlots), "a token per slot"},
		{RegionFence, OutFenceWordSize, "the fence word"},
		{RegionKV, int64(PageBytes(h)), "one KV page"},
		{RegionScratch, maxScratch, "the largest variant's scratch"},
	}
	if h.RecurrentBytes > 0 {
		need = append(need, region{RegionRecurrent, int64(h.MaxSlots) * int64(h.RecurrentBytes), "max_slots × the recurrent state of a slot"})
	}
	if h.KVWindowRing > 0 {
		need = append(need, region{RegionKVWindow, int64(h.MaxSlots) * int64(h.KVWindowRing) * int64(h.KVWindowPageBytes),
			"max_slots × a window ring"}, region{RegionIOWindow, need[0].bytes, "the window ring's request table"})
	}
	for _, n := range need {
		have, ok := size[n.region]
		switch {
		case !ok:
			return fmt.Errorf("memory plan lacks region %s", n.region)
		case have < n.bytes:
			return fmt.Errorf("region %s has %d bytes, %s needs %d", n.region, have, n.what, n.bytes)
		}
	}
	return nil
}
