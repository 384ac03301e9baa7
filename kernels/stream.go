package kernels

import "github.com/zrtdev/zrt/asm/pm4"

// StreamABI is the part of a kernel instance's ABI that the packet-stream
// checker (pm4.Check) needs: how many user-data dwords hold pointers, how
// many in all, and which pointers may be null.
func StreamABI(instance string) (pm4.KernelABI, error) {
	a, _, err := SplitInstance(instance)
	if err != nil {
		return pm4.KernelABI{}, err
	}
	k := pm4.KernelABI{Name: instance, Pointers: len(a.Bufs), UserData: a.UserDataDwords(), Nullable: make([]bool, len(a.Bufs))}
	for i, role := range a.Bufs {
		k.Nullable[i] = a.Optional[role]
	}
	return k, nil
}

// StreamEnv builds pm4.Check's environment for a compiled program: the
// memory plan's region names and sizes and its kernel instances, by index.
// The fence is the region named RegionFence, the one every stream's last
// RELEASE_MEM writes.
func StreamEnv(regionNames []string, regionBytes []int64, instances []string) (pm4.Env, error) {
	env := pm4.Env{Regions: regionBytes, Fence: -1}
	for i, n := range regionNames {
		if n == RegionFence {
			env.Fence = i
		}
	}
	for _, name := range instances {
		k, err := StreamABI(name)
		if err != nil {
			return env, err
		}
		env.Kernels = append(env.Kernels, k)
	}
	return env, nil
}
